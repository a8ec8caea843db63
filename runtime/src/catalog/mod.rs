//! A plugin's catalog as the host takes it: the instance types
//! `get-instance-types` lists, the compact catalog (0.1.2) expanded into
//! them, or the flat tables (0.1.4) kept as they crossed, so that the
//! controller reads them without a copy per string.

mod compact;
mod table;

pub(crate) use compact::expand;
pub use table::{Row, Table};

use super::bindings::wit;

/// A checked catalog, in the form the plugin gave it.
#[derive(Debug)]
pub enum InstanceTypes {
    Listed(Vec<wit::InstanceType>),
    Table(Table),
}

impl InstanceTypes {
    pub fn len(&self) -> usize {
        match self {
            InstanceTypes::Listed(types) => types.len(),
            InstanceTypes::Table(table) => table.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The instance types as `get-instance-types` lists them.
    pub fn into_listed(self) -> Vec<wit::InstanceType> {
        match self {
            InstanceTypes::Listed(types) => types,
            InstanceTypes::Table(table) => table.expand(),
        }
    }
}
