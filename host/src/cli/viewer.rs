//! `karpenter viewer`: one line per node, grouped by NodePool, with its
//! requested CPU and memory against allocatable and its price, under a
//! header of totals and pending pods; a full-screen view redrawn every
//! `--interval` and driven by keys (`controls.rs`), or one plain frame with
//! `--once` for scripts. Installed as `kubectl-karpenter` on PATH, it runs
//! as `kubectl karpenter viewer`.

use crate::viewer::controls::{Action, Controls, Key};
use crate::viewer::frame::{self, Options, Pending, Sort};
use anyhow::Context;
use clap::Args;
use karpenter_controller::crds::nodeclaim::conditions::DISRUPTION_REASON;
use karpenter_controller::{Ctx, disruption, provisioner};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct ViewerArgs {
    /// Print one frame as plain text and exit.
    #[arg(long)]
    pub once: bool,
    /// Only this NodePool's nodes.
    #[arg(long)]
    pub nodepool: Option<String>,
    /// Only nodes with these labels: `key=value,key2` (a bare key: any value).
    #[arg(short = 'l', long, default_value = "")]
    pub selector: String,
    #[arg(long, value_enum, default_value = "name")]
    pub sort: Sort,
    /// List nodes Karpenter does not manage too.
    #[arg(long)]
    pub unmanaged: bool,
    /// Time between frames.
    #[arg(long, default_value = "2s", value_parser = go_duration)]
    pub interval: Duration,
    /// The controller's plugins, whose catalogs give the prices; the
    /// providers built into this binary when omitted.
    #[arg(long, env = "PLUGIN_DIR")]
    pub plugin_dir: Option<PathBuf>,
    #[arg(long, env = "FEATURE_GATES", default_value = "")]
    pub feature_gates: String,
}

/// A Go duration (`2s`, `500ms`), as Karpenter's flags take them.
fn go_duration(s: &str) -> Result<Duration, String> {
    vocabulary::duration::parse(s).map_err(|e| e.to_string())
}

pub async fn run(args: ViewerArgs) -> anyhow::Result<ExitCode> {
    let ctx = super::explain::context(args.plugin_dir.as_deref(), &args.feature_gates).await?;
    let options = Options {
        node_pool: args.nodepool.clone(),
        selector: frame::parse_selector(&args.selector),
        sort: args.sort,
        unmanaged: args.unmanaged,
    };
    let mut observer = disruption::Observer::default();
    if args.once {
        let view = read(&ctx, &mut observer).await?;
        super::print(view.render(&options).trim_end());
        return Ok(ExitCode::SUCCESS);
    }
    if !std::io::stdout().is_terminal() {
        anyhow::bail!("the live viewer needs a terminal; --once prints one frame");
    }
    live(&ctx, &mut observer, Controls::new(options), args.interval).await?;
    Ok(ExitCode::SUCCESS)
}

/// The live view: a full-screen frame redrawn every `interval` and on each
/// key, until `q`, Esc or Ctrl-C. The terminal is restored however it ends.
async fn live(
    ctx: &Ctx,
    observer: &mut disruption::Observer,
    mut controls: Controls,
    interval: Duration,
) -> anyhow::Result<()> {
    let mut terminal = ratatui::try_init().context("setting up the terminal")?;
    let (keys, mut pressed) = tokio::sync::mpsc::channel(16);
    let reader = std::thread::spawn(move || read_keys(keys));
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut view: Option<View> = None;
    let mut status = String::from("reading the cluster…");
    let mut seen_at = String::from("never");
    let result = loop {
        let drawn = terminal.draw(|f| draw(f, view.as_ref(), &mut controls, &status));
        if let Err(e) = drawn {
            break Err(anyhow::Error::from(e).context("drawing"));
        }
        let refresh = tokio::select! {
            _ = ticks.tick() => true,
            key = pressed.recv() => match key {
                // The key reader stopped: the terminal is gone.
                None => break Ok(()),
                Some(None) => false,
                Some(Some(key)) => {
                    let pools = view.as_ref().map(View::pools).unwrap_or_default();
                    match controls.on_key(key, &pools) {
                        Action::Quit => break Ok(()),
                        Action::Refresh => true,
                        Action::Redraw => false,
                    }
                }
            },
            _ = tokio::signal::ctrl_c() => break Ok(()),
        };
        if refresh {
            status = refreshed(ctx, observer, &mut view, &mut seen_at, interval).await;
        }
    };
    drop(pressed);
    ratatui::restore();
    let _ = reader.join();
    result
}

/// Reads the cluster into `view` and says how that went. The frame comes
/// from watches, which keep their last state while the API server is away,
/// so the API server is asked directly whether it answers: a frame that
/// may be stale says since when.
async fn refreshed(
    ctx: &Ctx,
    observer: &mut disruption::Observer,
    view: &mut Option<View>,
    seen_at: &mut String,
    interval: Duration,
) -> String {
    let now = jiff::Timestamp::now().strftime("%H:%M:%S").to_string();
    let problem = match read(ctx, observer).await {
        Ok(v) => {
            *view = Some(v);
            match tokio::time::timeout(PROBE, ctx.client.apiserver_version()).await {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(format!("the API server does not answer ({e})")),
                Err(_) => Some(format!("the API server does not answer within {PROBE:?}")),
            }
        }
        Err(e) => Some(format!("cannot read the cluster ({e:#})")),
    };
    match problem {
        None => {
            *seen_at = now.clone();
            format!("updated {now}, every {interval:?}")
        }
        Some(why) => format!("{why}; showing the cluster as last seen at {seen_at}"),
    }
}

/// How long the API server has to answer the viewer's check.
const PROBE: Duration = Duration::from_secs(2);

/// Keys from the terminal until the viewer stops listening; `None` for a
/// resize, which only needs a redraw.
fn read_keys(keys: tokio::sync::mpsc::Sender<Option<Key>>) {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    while !keys.is_closed() {
        match event::poll(Duration::from_millis(100)) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(_) => return,
        }
        let key = match event::read() {
            Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => match k.code {
                KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => Key::Interrupt,
                KeyCode::Char('u') if k.modifiers.contains(KeyModifiers::CONTROL) => Key::ClearLine,
                KeyCode::Char(c) => Key::Char(c),
                KeyCode::Up => Key::Up,
                KeyCode::Down => Key::Down,
                KeyCode::PageUp => Key::PageUp,
                KeyCode::PageDown => Key::PageDown,
                KeyCode::Home => Key::Home,
                KeyCode::End => Key::End,
                KeyCode::Enter => Key::Enter,
                KeyCode::Esc => Key::Esc,
                KeyCode::Backspace => Key::Backspace,
                _ => continue,
            },
            Ok(Event::Resize(..)) => {
                if keys.blocking_send(None).is_err() {
                    return;
                }
                continue;
            }
            Ok(_) => continue,
            Err(_) => return,
        };
        if keys.blocking_send(Some(key)).is_err() {
            return;
        }
    }
}

/// The totals line stays at the top; the NodePools and their nodes scroll
/// under it, above the status and the keyboard help.
fn draw(f: &mut ratatui::Frame, view: Option<&View>, controls: &mut Controls, status: &str) {
    use ratatui::layout::{Constraint, Layout};
    use ratatui::style::{Modifier, Style};
    use ratatui::widgets::Paragraph;
    let [head, body, status_area, help_area] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let text = view
        .map(|v| v.render(&controls.options))
        .unwrap_or_default();
    let (totals, nodes) = text.split_once('\n').unwrap_or((&text, ""));
    let last = nodes
        .lines()
        .count()
        .saturating_sub(usize::from(body.height));
    controls.scroll = controls.scroll.min(last);
    let bold = Style::default().add_modifier(Modifier::BOLD);
    f.render_widget(Paragraph::new(totals).style(bold), head);
    f.render_widget(
        Paragraph::new(nodes).scroll((u16::try_from(controls.scroll).unwrap_or(u16::MAX), 0)),
        body,
    );
    f.render_widget(
        Paragraph::new(status).style(Style::default().add_modifier(Modifier::REVERSED)),
        status_area,
    );
    f.render_widget(Paragraph::new(controls.help()), help_area);
}

/// What one read of the cluster gives, drawn again under other options
/// without reading it again.
struct View {
    snap: engine::disruption::DisruptionSnapshot,
    pending: Pending,
    disrupting: BTreeMap<String, String>,
}

impl View {
    fn render(&self, options: &Options) -> String {
        frame::render(&self.snap, &self.pending, &self.disrupting, options)
    }

    fn pools(&self) -> Vec<String> {
        self.snap
            .node_pools
            .iter()
            .map(|p| p.pool.name.clone())
            .collect()
    }
}

async fn read(ctx: &Ctx, observer: &mut disruption::Observer) -> anyhow::Result<View> {
    let snap = disruption::snapshot(ctx, observer).await;
    let decision = provisioner::decide(ctx).await?;
    let pending = match &decision {
        None => Pending::default(),
        Some(d) => {
            let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
            for u in &d.plan.unschedulable {
                *reasons.entry(u.reason.as_str()).or_default() += 1;
            }
            let largest = reasons
                .into_iter()
                .max_by_key(|(why, n)| (*n, std::cmp::Reverse(*why)))
                .map(|(why, n)| (n, why.to_string()));
            Pending {
                count: d.snapshot.pods.len(),
                largest,
                to_launch: d
                    .plan
                    .placements
                    .iter()
                    .filter(|p| matches!(p.target, engine::Target::NewNodeClaim(_)))
                    .count(),
            }
        }
    };
    Ok(View {
        snap,
        pending,
        disrupting: disrupting(ctx),
    })
}

/// Nodes (and NodeClaims without one) a disruption command is replacing or
/// removing, with its reason.
fn disrupting(ctx: &Ctx) -> BTreeMap<String, String> {
    ctx.cluster
        .node_claims
        .state()
        .iter()
        .filter_map(|nc| {
            let c = nc.condition(DISRUPTION_REASON)?;
            (c.status == "True").then(|| {
                let name = nc
                    .node_name()
                    .map(str::to_string)
                    .unwrap_or_else(|| kube::ResourceExt::name_any(nc.as_ref()));
                (name, c.reason.clone())
            })
        })
        .collect()
}
