//! The stack profile the profile writers (`export::pprof`, `export::flamegraph`: features of those
//! names) draw: samples of named stacks with one value per sample type. Each report that has stacks
//! to show (the heap report, the CPU sampling report) converts into one ([`ToStackProfile`]), so
//! there is one writer per format.

use crate::decode::symbols::Frame;

/// A sample type or the period's type: what is counted, in which unit (`samples`/`count`,
/// `inuse_space`/`bytes`, `cpu`/`nanoseconds`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueType {
    pub kind: String,
    pub unit: String,
}

impl ValueType {
    pub fn new(kind: &str, unit: &str) -> ValueType {
        ValueType {
            kind: kind.into(),
            unit: unit.into(),
        }
    }
}

/// One stack and its values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileSample {
    /// The process the stack ran in (a numeric `pid` label in pprof).
    pub pid: Option<u32>,
    /// Its image name, when known (a `process` label in pprof; the flame graph's base is
    /// `name (pid)`, else `pid N`).
    pub process: Option<String>,
    /// Innermost frame first; empty when the sample had no stack (`[no stack]`).
    pub frames: Vec<Frame>,
    /// One value per [`StackProfile::sample_types`].
    pub values: Vec<u64>,
}

/// How a flame graph of the profile is titled and what it counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlameStyle {
    /// The default title.
    pub title: String,
    /// What the widths count (`bytes`, `samples`).
    pub count_name: String,
    /// Memory colours (else the hot palette of CPU flame graphs).
    pub memory: bool,
    /// What an empty graph says (its subtitle), and its one placeholder frame.
    pub empty_subtitle: String,
    pub empty_frame: String,
}

/// Samples of named stacks with one value per sample type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackProfile {
    pub sample_types: Vec<ValueType>,
    /// The index in `sample_types` of what pprof shows first and the flame graph draws.
    pub default_sample_type: usize,
    /// What one event stands for: its type, and how much (pprof's period).
    pub period_type: ValueType,
    pub period: u64,
    /// Notes on the figures (pprof comments).
    pub comments: Vec<String>,
    pub samples: Vec<ProfileSample>,
    pub flame: FlameStyle,
}

/// A report that can be written as a profile.
pub trait ToStackProfile {
    fn to_stack_profile(&self) -> StackProfile;
}

impl ToStackProfile for StackProfile {
    fn to_stack_profile(&self) -> StackProfile {
        self.clone()
    }
}

/// The name a profile gives a frame: its function, else `module+0xOFFSET` (or `module!0xADDR`
/// when the offset is not known), else `0xADDR`.
pub fn frame_function(f: &Frame) -> String {
    match (&f.function, &f.module, f.offset) {
        (Some(n), _, _) => n.clone(),
        (None, Some(m), Some(off)) => format!("{m}+{off:#x}"),
        (None, Some(m), None) => format!("{m}!{:#x}", f.address),
        (None, None, _) => format!("{:#x}", f.address),
    }
}
