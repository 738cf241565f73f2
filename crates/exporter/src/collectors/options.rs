//! What a collector owns of the configuration: its settings table `[NAME]` (a type of its
//! crate, with its defaults and checks) and its flags. The registry reads the table from the
//! config file (strictly, for errors that name the line and key) and from the layered
//! configuration, adds the flags to the command line with the defaults taken from the type's
//! `Default`, turns given flags into overrides of the table's keys, and compares the table on
//! reload. Nothing outside a collector's descriptor file names its keys.

use std::any::Any;
use std::fmt::{self, Debug};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches};
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use crate::config::{ConfigError, Settings};

/// A collector's settings table: the type its `[NAME]` deserializes into.
pub trait TableOptions:
    DeserializeOwned + Default + Clone + PartialEq + Debug + Send + Sync + 'static
{
    /// Checks the table once all settings are read (`settings` gives the collector's timing
    /// and the daemon's tables it shares). The message starts with the dotted key.
    fn check(&self, settings: &Settings) -> Result<(), ConfigError>;
}

/// A [`TableOptions`] value behind a pointer: what [`Tables`] holds.
pub trait Options: Any + Debug + Send + Sync {
    /// For the typed access of [`Settings::options`].
    fn as_any(&self) -> &dyn Any;
    /// Whether `other` holds the same settings (of the same type).
    fn same_as(&self, other: &dyn Options) -> bool;
    /// A copy.
    fn clone_box(&self) -> Box<dyn Options>;
    /// [`TableOptions::check`].
    fn check_options(&self, settings: &Settings) -> Result<(), ConfigError>;
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

    fn check_options(&self, settings: &Settings) -> Result<(), ConfigError> {
        TableOptions::check(self, settings)
    }
}

/// A table read from somewhere: `None` when that source does not set it.
type Read<E> = Result<Option<Box<dyn Options>>, E>;

/// How the registry reads one collector's table, as functions of its type.
#[derive(Clone, Copy)]
pub struct Table {
    default: fn() -> Box<dyn Options>,
    from_file: fn(&str, &'static str) -> Read<toml::de::Error>,
    from_config: fn(&config::Config, &'static str) -> Read<config::ConfigError>,
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
            from_config: from_config::<T>,
        }
    }

    /// Its defaults.
    pub fn default_options(&self) -> Box<dyn Options> {
        (self.default)()
    }

    /// `[name]` of the config file `text`, parsed strictly (its errors carry the span of the
    /// key); `None` when the file has no such table.
    pub fn read_file(
        &self,
        text: &str,
        name: &'static str,
    ) -> Result<Option<Box<dyn Options>>, toml::de::Error> {
        (self.from_file)(text, name)
    }

    /// `name` of the layered configuration; `None` when no layer sets it.
    pub fn read_config(
        &self,
        config: &config::Config,
        name: &'static str,
    ) -> Result<Option<Box<dyn Options>>, config::ConfigError> {
        (self.from_config)(config, name)
    }
}

fn default_of<T: TableOptions>() -> Box<dyn Options> {
    Box::new(T::default())
}

fn from_config<T: TableOptions>(
    config: &config::Config,
    name: &'static str,
) -> Result<Option<Box<dyn Options>>, config::ConfigError> {
    match config.get::<T>(name) {
        Ok(t) => Ok(Some(Box::new(t))),
        Err(config::ConfigError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deserializes key `name` of a TOML document as `T` and skips every other key, so that the
/// TOML deserializer itself reads the table and its errors keep their spans.
fn from_file<T: TableOptions>(
    text: &str,
    name: &'static str,
) -> Result<Option<Box<dyn Options>>, toml::de::Error> {
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
    /// The table of collector `name`.
    pub fn get(&self, name: &str) -> Option<&dyn Options> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, o)| o.as_ref())
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

impl Default for Tables {
    fn default() -> Tables {
        Tables(
            super::COLLECTORS
                .iter()
                .filter_map(|c| Some((c.name, c.table?.default_options())))
                .collect(),
        )
    }
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

impl Settings {
    /// The table of `collector`, typed. Every registered table is always present (defaults
    /// fill what nothing sets); a lookup with the wrong type is a programming error, answered
    /// with the type's defaults rather than a panic.
    pub fn options<T: TableOptions>(&self, collector: &super::Collector) -> &T {
        match self
            .tables
            .get(collector.name)
            .and_then(|o| o.as_any().downcast_ref::<T>())
        {
            Some(t) => t,
            None => {
                tracing::error!(
                    collector = collector.name,
                    "settings table of the wrong type"
                );
                Box::leak(Box::new(T::default()))
            }
        }
    }
}

/// What a collector flag's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagKind {
    /// A path.
    Path,
    /// A path, repeatable: the key takes the list.
    Paths,
    /// A string.
    Text,
    /// A duration in humantime syntax.
    Duration,
    /// A whole number.
    Count,
}

/// What `--help` prints as a flag's default.
#[derive(Debug, Clone, Copy)]
pub enum FlagDefault {
    /// Nothing (the key has no default, e.g. a directory that turns the source on).
    None,
    /// A sentence, where the default is a behaviour rather than a value.
    Says(fn() -> String),
}

/// One flag of a collector: `--NAME VALUE` overrides key `key` of the layered settings.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    /// `--NAME`, Prometheus style (`dcgm.hostengine`).
    pub name: &'static str,
    /// The settings key it sets (`dcgm.hostengine`).
    pub key: &'static str,
    /// What `--help` shows as the value.
    pub value_name: &'static str,
    /// Its `--help` text, without the default.
    pub help: &'static str,
    /// Its default in `--help`.
    pub default: FlagDefault,
    /// How its value is parsed.
    pub kind: FlagKind,
    /// Where it sits among the options in `--help` (the daemon's own flags hold the tens
    /// from 10 to 190, see `cli.rs`).
    pub order: usize,
}

impl Flag {
    /// The clap argument.
    pub fn arg(&self) -> Arg {
        let help = match self.default {
            FlagDefault::None => self.help.to_string(),
            FlagDefault::Says(f) => format!("{} [default: {}]", self.help, f()),
        };
        let arg = Arg::new(self.name)
            .long(self.name)
            .value_name(self.value_name)
            .help(help)
            .display_order(self.order);
        match self.kind {
            FlagKind::Path => arg.value_parser(clap::value_parser!(PathBuf)),
            FlagKind::Paths => arg
                .value_parser(clap::value_parser!(PathBuf))
                .action(ArgAction::Append),
            FlagKind::Text => arg,
            FlagKind::Duration => arg.value_parser(crate::cli::duration_arg),
            FlagKind::Count => arg.value_parser(clap::value_parser!(u64)),
        }
    }

    /// The override its given value makes, if given.
    pub fn value(&self, m: &ArgMatches) -> Option<config::Value> {
        let path = |p: &PathBuf| p.display().to_string();
        match self.kind {
            FlagKind::Path => m.get_one::<PathBuf>(self.name).map(|p| path(p).into()),
            FlagKind::Paths => m
                .get_many::<PathBuf>(self.name)
                .map(|ps| ps.map(path).collect::<Vec<_>>().into()),
            FlagKind::Text => m.get_one::<String>(self.name).map(|s| s.clone().into()),
            FlagKind::Duration => m
                .get_one::<Duration>(self.name)
                .map(|d| humantime::format_duration(*d).to_string().into()),
            FlagKind::Count => m.get_one::<u64>(self.name).map(|n| (*n).into()),
        }
    }
}
