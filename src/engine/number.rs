//! A broadcast's number, as the endpoint keys it and the wire carries it: the communicator's
//! id in the high 32 bits, the broadcast's sequence number on that communicator in the low
//! 32. Sequence numbers grow per communicator (MPI orders collectives per communicator:
//! broadcasts of two communicators may be posted in any interleaving, and in different ones
//! at different ranks), so the [`Endpoint`](super::Endpoint) compares only numbers of one
//! communicator. The base communicator has id 0: its numbers are its sequence numbers.
//! Below the endpoint a number is an opaque key (buffers, registrations, frames).

/// The number of broadcast `seq` of communicator `comm`.
pub const fn number(comm: u32, seq: u32) -> u64 {
    ((comm as u64) << 32) | seq as u64
}

/// The communicator of broadcast `number`.
pub const fn comm_of(number: u64) -> u32 {
    (number >> 32) as u32
}

/// The sequence number of broadcast `number` on its communicator.
pub const fn seq_of(number: u64) -> u32 {
    number as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_split_into_communicator_and_sequence() {
        assert_eq!(
            number(0, 7),
            7,
            "the base communicator's numbers are its sequence"
        );
        let n = number(u32::MAX, u32::MAX);
        assert_eq!((comm_of(n), seq_of(n)), (u32::MAX, u32::MAX));
        assert_eq!((comm_of(number(5, 1)), seq_of(number(5, 1))), (5, 1));
        assert!(number(1, 1) > number(0, u32::MAX));
    }
}
