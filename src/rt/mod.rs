//! The scheduler.

pub mod runq;
