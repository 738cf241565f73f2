//! A collector's settings table `[NAME]`: a type of the collector's crate, with its defaults
//! and checks. The daemon reads it from the config file (strictly, through [`Table::read_file`],
//! for errors that name the line and key) and from the layered configuration (through
//! [`Table::deserialize`], whatever deserializer the daemon's configuration library offers),
//! and compares it on reload.

use std::any::Any;
use std::fmt::{self, Debug};
use std::marker::PhantomData;

use dgx_pixels_settings::SettingError;
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use crate::{Check, Collector};

/// A collector's settings table: the type its `[NAME]` deserializes into.
pub trait TableOptions:
    DeserializeOwned + Default + Clone + PartialEq + Debug + Send + Sync + 'static
{
    /// Checks the table once all settings are read (`check` gives the collector's timing and
    /// whether the node is simulated). Most tables check their keys while they deserialize
    /// and have nothing left to check here.
    fn validate(&self, check: &Check) -> Result<(), SettingError> {
        let _ = check;
        Ok(())
    }
}

/// A [`TableOptions`] value behind a pointer: what [`Tables`] holds.
pub trait Options: Any + Debug + Send + Sync {
    /// For the typed access of [`Tables::get_as`].
    fn as_any(&self) -> &dyn Any;
    /// Whether `other` holds the same settings (of the same type).
    fn same_as(&self, other: &dyn Options) -> bool;
    /// A copy.
    fn clone_box(&self) -> Box<dyn Options>;
    /// [`TableOptions::validate`].
    fn validate_options(&self, check: &Check) -> Result<(), SettingError>;
}

impl<T: TableOptions> Options for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn same_as(&self, other: &dyn Options) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn clone_box(&self) -> Box<dyn Options> {
        Box::new(self.clone())
    }

    fn validate_options(&self, check: &Check) -> Result<(), SettingError> {
        TableOptions::validate(self, check)
    }
}

/// A table read from somewhere: `None` when that source does not set it.
type Read<E> = Result<Option<Box<dyn Options>>, E>;

/// A table deserialized through the type-erased deserializer.
type Deserialized = Result<Box<dyn Options>, erased_serde::Error>;

/// How the daemon reads one collector's table, as functions of its type.
#[derive(Clone, Copy)]
pub struct Table {
    default: fn() -> Box<dyn Options>,
    from_file: fn(&str, &'static str) -> Read<toml::de::Error>,
    deserialize: fn(&mut dyn erased_serde::Deserializer<'_>) -> Deserialized,
}

impl Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Table")
    }
}

impl Table {
    /// The table of type `T`.
    pub const fn of<T: TableOptions>() -> Table {
        Table {
            default: default_of::<T>,
            from_file: from_file::<T>,
            deserialize: deserialize::<T>,
        }
    }

    /// Its defaults.
    pub fn default_options(&self) -> Box<dyn Options> {
        (self.default)()
    }

    /// `[name]` of the config file `text`, parsed strictly (its errors carry the span of the
    /// key); `None` when the file has no such table.
    pub fn read_file(&self, text: &str, name: &'static str) -> Read<toml::de::Error> {
        (self.from_file)(text, name)
    }

    /// The table from any deserializer (the daemon's layered configuration gives one per
    /// table): the type-erased form keeps this crate free of the configuration library.
    pub fn deserialize(
        &self,
        d: &mut dyn erased_serde::Deserializer<'_>,
    ) -> Result<Box<dyn Options>, erased_serde::Error> {
        (self.deserialize)(d)
    }
}

fn default_of<T: TableOptions>() -> Box<dyn Options> {
    Box::new(T::default())
}

fn deserialize<T: TableOptions>(
    d: &mut dyn erased_serde::Deserializer<'_>,
) -> Result<Box<dyn Options>, erased_serde::Error> {
    Ok(Box::new(erased_serde::deserialize::<T>(d)?))
}

/// Deserializes key `name` of a TOML document as `T` and skips every other key, so that the
/// TOML deserializer itself reads the table and its errors keep their spans.
fn from_file<T: TableOptions>(text: &str, name: &'static str) -> Read<toml::de::Error> {
    struct Only<T>(&'static str, PhantomData<T>);
    impl<'de, T: TableOptions> Visitor<'de> for Only<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a TOML document")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
            let mut found = None;
            while let Some(key) = map.next_key::<String>()? {
                if key == self.0 {
                    found = Some(map.next_value::<T>()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    impl<'de, T: TableOptions> DeserializeSeed<'de> for Only<T> {
        type Value = Option<T>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
            d.deserialize_map(self)
        }
    }
    let found = Only::<T>(name, PhantomData).deserialize(toml::Deserializer::new(text))?;
    Ok(found.map(|t| Box::new(t) as Box<dyn Options>))
}

/// Every registered collector's table, by collector name; defaults where nothing sets them.
pub struct Tables(Vec<(&'static str, Box<dyn Options>)>);

impl Tables {
    /// The defaults of every table of `collectors`.
    pub fn defaults<'a>(collectors: impl IntoIterator<Item = &'a Collector>) -> Tables {
        Tables(
            collectors
                .into_iter()
                .filter_map(|c| Some((c.name, c.table?.default_options())))
                .collect(),
        )
    }

    /// The table of collector `name`.
    pub fn get(&self, name: &str) -> Option<&dyn Options> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, o)| o.as_ref())
    }

    /// The table of `collector`, typed. Every registered table is always present (defaults
    /// fill what nothing sets); a lookup with the wrong type is a programming error, answered
    /// with the type's defaults rather than a panic.
    pub fn get_as<T: TableOptions>(&self, collector: &Collector) -> &T {
        match self
            .get(collector.name)
            .and_then(|o| o.as_any().downcast_ref::<T>())
        {
            Some(t) => t,
            None => wrong_type::<T>(collector.name),
        }
    }

    /// Sets the table of collector `name`.
    pub fn set(&mut self, name: &'static str, options: Box<dyn Options>) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = options,
            None => self.0.push((name, options)),
        }
    }

    /// Each table with its collector's name, in registry order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &dyn Options)> {
        self.0.iter().map(|(n, o)| (*n, o.as_ref()))
    }
}

/// The defaults of `T`, for a lookup of the wrong type (logged; leaked once per call, which
/// only a programming error reaches).
pub(crate) fn wrong_type<T: TableOptions>(collector: &str) -> &'static T {
    tracing::error!(collector, "settings table of the wrong type");
    Box::leak(Box::new(T::default()))
}

impl Clone for Tables {
    fn clone(&self) -> Tables {
        Tables(self.0.iter().map(|(n, o)| (*n, o.clone_box())).collect())
    }
}

impl PartialEq for Tables {
    fn eq(&self, other: &Tables) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .all(|(n, o)| other.get(n).is_some_and(|p| o.same_as(p)))
    }
}

impl Debug for Tables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(n, o)| (n, o)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, Default, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Demo {
        count: u32,
    }
    impl TableOptions for Demo {}

    #[test]
    fn a_table_reads_from_a_file_with_spans_and_from_any_deserializer() {
        let t = Table::of::<Demo>();
        let read = t
            .read_file("[other]\nx = 1\n[demo]\ncount = 3\n", "demo")
            .unwrap();
        assert!(read.unwrap().same_as(&Demo { count: 3 }));
        assert!(t.read_file("[other]\n", "demo").unwrap().is_none());
        let e = t.read_file("[demo]\ncount = \"x\"\n", "demo").unwrap_err();
        assert!(e.span().is_some(), "{e}");
        let value: toml::Value = toml::from_str("count = 7").unwrap();
        let mut d = <dyn erased_serde::Deserializer>::erase(value);
        assert!(t.deserialize(&mut d).unwrap().same_as(&Demo { count: 7 }));
        let value: toml::Value = toml::from_str("nope = 7").unwrap();
        let mut d = <dyn erased_serde::Deserializer>::erase(value);
        let e = t.deserialize(&mut d).unwrap_err().to_string();
        assert!(e.starts_with("unknown field `nope`"), "{e}");
    }
}
