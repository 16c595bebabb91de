//! Raw Ethernet transport (EtherType 0x88B5).
pub mod reliable;
