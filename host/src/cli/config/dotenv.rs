//! The `.env` file of the seed's CLI: `export NAME=value` lines (`export`
//! optional), `#` comments, values optionally quoted.

use std::collections::BTreeMap;

pub fn parse(text: &str) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        vars.insert(name.trim().to_string(), unquote(value.trim()));
    }
    vars
}

fn unquote(value: &str) -> String {
    for q in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(q).and_then(|v| v.strip_suffix(q)) {
            return inner.to_string();
        }
    }
    // An unquoted value ends at a comment.
    match value.find(" #") {
        Some(i) => value[..i].trim_end().to_string(),
        None => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_seeds_env_file() {
        let vars = super::parse(
            "export LOCATION=southcentralus\nexport AZURE_SUBSCRIPTION_ID=\"0000-1111\"\n# a comment\n\nRESOURCE_GROUP_NAME='rg-aks-flex-me'\nexport CLUSTER_NAME=aks # the name\nnot a variable\n",
        );
        assert_eq!(vars["LOCATION"], "southcentralus");
        assert_eq!(vars["AZURE_SUBSCRIPTION_ID"], "0000-1111");
        assert_eq!(vars["RESOURCE_GROUP_NAME"], "rg-aks-flex-me");
        assert_eq!(vars["CLUSTER_NAME"], "aks");
        assert_eq!(vars.len(), 4);
    }
}
