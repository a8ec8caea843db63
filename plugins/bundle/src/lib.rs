//! The providers built into the binary: `karpenter simulate` and `explain`
//! plan with them when no plugin directory is given, so a copied or
//! installed binary needs no checkout and no `make plugins`. The controller
//! loads one only where its operator's configuration names it
//! (`source: {builtin: azure}`, as the chart does for its bundled plugins),
//! with the grants that configuration gives.

use std::path::Path;

macro_rules! provider {
    ($name:literal) => {
        (
            $name,
            include_bytes!(concat!(env!("OUT_DIR"), "/plugins/", $name, ".wasm")).as_slice(),
        )
    };
}

/// Each provider's name and component.
pub const PROVIDERS: [(&str, &[u8]); 3] =
    [provider!("kwok"), provider!("azure"), provider!("nebius")];

/// The same providers as files, `<name>.wasm`: a directory a registry can
/// open (tests load them from here).
pub fn dir() -> &'static Path {
    Path::new(concat!(env!("OUT_DIR"), "/plugins"))
}
