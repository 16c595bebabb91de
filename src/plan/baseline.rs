//! Topology-unaware baseline trees — to be written.
use super::Lane;
use crate::topology::MachineId;

pub fn flat(size: usize, root: MachineId) -> Lane {
    let mut children = vec![Vec::new(); size];
    children[root] = (0..size).filter(|&r| r != root).collect();
    Lane::from_children(children)
}
pub fn binomial(size: usize, root: MachineId) -> Lane {
    flat(size, root)
}
pub fn naive_linear(size: usize, root: MachineId) -> Lane {
    let order: Vec<usize> = (0..size).map(|i| (root + i) % size).collect();
    Lane::chain(size, &order)
}
pub fn naive_binary(size: usize, root: MachineId) -> Lane {
    flat(size, root)
}
