//! What the viewer's keys do: a pure state machine over the frame's
//! options and the scroll position, so every key is tested without a
//! terminal.

use super::frame::{Options, Sort, parse_selector};

/// A key as the viewer reads it, whatever the terminal library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Enter,
    Esc,
    Backspace,
    /// Ctrl-U: empties the line being typed.
    ClearLine,
    /// Ctrl-C, which a terminal in raw mode delivers as a key.
    Interrupt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Draw again from the data already read.
    Redraw,
    /// Read the cluster now.
    Refresh,
    Quit,
}

#[derive(Debug, Clone)]
pub struct Controls {
    pub options: Options,
    /// First line of the node list shown.
    pub scroll: usize,
    /// The label selector being typed after `/`, until Enter or Esc.
    pub editing: Option<String>,
}

/// Lines a page key moves.
const PAGE: usize = 20;

impl Controls {
    pub fn new(options: Options) -> Controls {
        Controls {
            options,
            scroll: 0,
            editing: None,
        }
    }

    /// Applies `key`; `pools` are the NodePools `p` cycles through.
    pub fn on_key(&mut self, key: Key, pools: &[String]) -> Action {
        if let Some(text) = &mut self.editing {
            match key {
                Key::Enter => {
                    self.options.selector = parse_selector(text);
                    self.editing = None;
                    self.scroll = 0;
                }
                Key::Esc => self.editing = None,
                Key::Backspace => {
                    text.pop();
                }
                Key::ClearLine => text.clear(),
                Key::Char(c) => text.push(c),
                Key::Interrupt => return Action::Quit,
                _ => {}
            }
            return Action::Redraw;
        }
        match key {
            Key::Char('q') | Key::Esc | Key::Interrupt => return Action::Quit,
            Key::Char('s') => self.options.sort = next_sort(self.options.sort),
            Key::Char('p') => {
                self.options.node_pool = next_pool(self.options.node_pool.as_deref(), pools);
                self.scroll = 0;
            }
            Key::Char('u') => self.options.unmanaged = !self.options.unmanaged,
            Key::Char('/') => {
                self.editing = Some(selector_text(&self.options.selector));
            }
            Key::Char('r') => return Action::Refresh,
            Key::Up | Key::Char('k') => self.scroll = self.scroll.saturating_sub(1),
            Key::Down | Key::Char('j') => self.scroll += 1,
            Key::PageUp => self.scroll = self.scroll.saturating_sub(PAGE),
            Key::PageDown | Key::Char(' ') => self.scroll += PAGE,
            Key::Home | Key::Char('g') => self.scroll = 0,
            Key::End | Key::Char('G') => self.scroll = usize::MAX,
            _ => {}
        }
        Action::Redraw
    }

    /// The keyboard help line, with the current value of each setting.
    pub fn help(&self) -> String {
        if let Some(text) = &self.editing {
            return format!(
                "labels: {text}_   (key=value,key; Enter applies, Esc cancels, Ctrl-U clears)"
            );
        }
        let o = &self.options;
        format!(
            "q quit  s sort: {}  p pool: {}  / labels: {}  u unmanaged: {}  r refresh  ↑↓ PgUp PgDn scroll",
            sort_name(o.sort),
            o.node_pool.as_deref().unwrap_or("all"),
            match selector_text(&o.selector) {
                s if s.is_empty() => "-".to_string(),
                s => s,
            },
            if o.unmanaged { "shown" } else { "hidden" },
        )
    }
}

fn next_sort(s: Sort) -> Sort {
    match s {
        Sort::Name => Sort::Price,
        Sort::Price => Sort::Utilization,
        Sort::Utilization => Sort::Age,
        Sort::Age => Sort::Name,
    }
}

fn sort_name(s: Sort) -> &'static str {
    match s {
        Sort::Name => "name",
        Sort::Price => "price",
        Sort::Utilization => "utilization",
        Sort::Age => "age",
    }
}

/// All, then each pool in turn, then all again. A pool that went away
/// moves on to the first.
fn next_pool(current: Option<&str>, pools: &[String]) -> Option<String> {
    match current {
        None => pools.first().cloned(),
        Some(p) => match pools.iter().position(|q| q == p) {
            Some(i) => pools.get(i + 1).cloned(),
            None => pools.first().cloned(),
        },
    }
}

fn selector_text(selector: &[(String, Option<String>)]) -> String {
    selector
        .iter()
        .map(|(k, v)| match v {
            Some(v) => format!("{k}={v}"),
            None => k.clone(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controls() -> Controls {
        Controls::new(Options {
            node_pool: None,
            selector: vec![],
            sort: Sort::Name,
            unmanaged: false,
        })
    }

    fn press(c: &mut Controls, keys: &str) {
        let pools = ["a".to_string(), "b".to_string()];
        for k in keys.chars() {
            let key = match k {
                '\n' => Key::Enter,
                '\x1b' => Key::Esc,
                '\x08' => Key::Backspace,
                c => Key::Char(c),
            };
            c.on_key(key, &pools);
        }
    }

    #[test]
    fn s_cycles_the_sort_and_p_the_node_pools() {
        let mut c = controls();
        press(&mut c, "s");
        assert_eq!(c.options.sort, Sort::Price);
        press(&mut c, "sss");
        assert_eq!(c.options.sort, Sort::Name, "back to the first");
        press(&mut c, "p");
        assert_eq!(c.options.node_pool.as_deref(), Some("a"));
        press(&mut c, "p");
        assert_eq!(c.options.node_pool.as_deref(), Some("b"));
        press(&mut c, "p");
        assert_eq!(c.options.node_pool, None, "then all again");
        assert!(c.help().contains("sort: name  p pool: all"), "{}", c.help());
    }

    #[test]
    fn slash_edits_the_label_selector_until_enter_and_esc_cancels() {
        let mut c = controls();
        press(&mut c, "/zone=x\x08a,gpu\n");
        assert_eq!(
            c.options.selector,
            vec![
                ("zone".to_string(), Some("a".to_string())),
                ("gpu".to_string(), None)
            ]
        );
        assert!(c.help().contains("labels: zone=a,gpu"), "{}", c.help());
        press(&mut c, "/q\x1b");
        assert_eq!(c.options.selector.len(), 2, "Esc keeps the old selector");
        assert!(c.editing.is_none());
        c.on_key(Key::Char('/'), &[]);
        c.on_key(Key::ClearLine, &[]);
        c.on_key(Key::Enter, &[]);
        assert!(c.options.selector.is_empty(), "Ctrl-U then Enter clears it");
    }

    #[test]
    fn q_esc_and_ctrl_c_quit_but_q_in_the_selector_is_a_letter() {
        let pools = [];
        for key in [Key::Char('q'), Key::Esc, Key::Interrupt] {
            assert_eq!(controls().on_key(key, &pools), Action::Quit);
        }
        let mut c = controls();
        c.on_key(Key::Char('/'), &pools);
        assert_eq!(c.on_key(Key::Char('q'), &pools), Action::Redraw);
        assert_eq!(c.on_key(Key::Interrupt, &pools), Action::Quit);
    }

    #[test]
    fn scrolling_stops_at_the_top() {
        let mut c = controls();
        c.on_key(Key::Up, &[]);
        assert_eq!(c.scroll, 0);
        c.on_key(Key::PageDown, &[]);
        c.on_key(Key::Up, &[]);
        assert_eq!(c.scroll, PAGE - 1);
        assert_eq!(c.on_key(Key::Char('r'), &[]), Action::Refresh);
    }
}
