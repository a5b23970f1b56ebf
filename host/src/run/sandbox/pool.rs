//! How the engine allocates instances: on demand (wasmtime's default) or from a pool reserved
//! up front.
//!
//! ```text
//!  InstanceAllocator::OnDemand   each start mmaps its memories, tables and fiber stack
//!                                (about 7 mappings a session: ~9,000 live sessions reach
//!                                 vm.max_map_count = 65530)
//!  InstanceAllocator::Pooling    one reservation per kind at Host creation; a start takes
//!                                slots (about 4 mappings a session: 10,000 live sessions fit),
//!                                a session beyond `max_sessions` is refused with
//!                                HostError::PoolExhausted
//! ```
//!
//! The allocator does not change generated code, so both share one cached artifact; the
//! memory cap stays the [`Policy`](crate::Policy)'s (the pool's own per-memory ceiling is left
//! at wasmtime's 4 GiB, so it never bites before the policy's cap does).

use wasmtime::{InstanceAllocationStrategy, PoolingAllocationConfig};

/// How wasm instances get their memories, tables and stacks. The default is
/// [`InstanceAllocator::OnDemand`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum InstanceAllocator {
    /// Map each session's resources when it starts and unmap them when it ends. No limit on
    /// the number of sessions, but each costs several memory mappings, and the kernel's
    /// `vm.max_map_count` (65530 by default) caps live sessions near 9,000.
    #[default]
    OnDemand,
    /// Reserve address space for a fixed number of sessions when the [`Host`](crate::Host) is
    /// created, and hand out slots. Faster starts, fewer mappings per session.
    Pooling(Pooling),
}

/// Sizes of the pooling allocator, per live wasm session. Defaults (from [`Pooling::new`]):
/// - `core_instances_per_session`: 16 (a Rust component has a handful; componentize-py's
///   need 14);
/// - `memories_per_session`: 2;
/// - `tables_per_session`: 16;
/// - `table_elements`: 20,000 elements per table (wasmtime's pooling default);
/// - `keep_memory_resident` and `keep_stack_resident`: 0 (wasmtime's defaults).
///
/// **Keeping slots warm.** When a session ends, wasmtime resets its slot for the next one:
/// by default it hands the pages back to the kernel (`madvise(MADV_DONTNEED)`), so the next
/// session page-faults every page it touches again. [`Pooling::keep_memory_resident`] and
/// [`Pooling::keep_stack_resident`] make it zero that many leading bytes of each linear memory
/// and fiber stack with `memset` instead. The next session then starts without those page
/// faults, madvise calls or TLB flushes (for `echo-lines` start to first response drops by
/// 10–30 %; see BENCHMARKS.md), and it still sees only zeroed or freshly initialized memory.
/// The price: a slot that has been used once keeps that many bytes resident for good, even
/// while no session holds it. A Rust guest's first 1 MiB is its stack, with data and heap above it, so
/// covering a small Rust plugin takes about 1.2 MiB of memory and 64 KiB of stack.
///
/// Address space: each memory slot reserves wasmtime's default 4 GiB plus guard, so
/// `max_sessions * memories_per_session` slots must fit the 128 TiB user address space
/// (10,000 sessions with 2 memories each take about 80 TiB, reserved, not resident).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pooling {
    /// Live wasm sessions at once; one more is refused with
    /// [`HostError::PoolExhausted`](crate::HostError::PoolExhausted).
    pub max_sessions: u32,
    /// Core module instances one session may hold (a p1 module is one; a component has
    /// several).
    pub core_instances_per_session: u32,
    /// Linear memories one session may hold.
    pub memories_per_session: u32,
    /// Tables one session may hold.
    pub tables_per_session: u32,
    /// Largest table, in elements; a module whose table starts larger fails to start.
    pub table_elements: u32,
    /// Leading bytes of each linear memory reset with `memset` (and so kept resident) instead
    /// of returned to the kernel when a session ends. See "Keeping slots warm" above.
    pub keep_memory_resident: usize,
    /// Leading bytes of each fiber stack reset with `memset` and kept resident. See "Keeping
    /// slots warm" above.
    pub keep_stack_resident: usize,
}

impl Pooling {
    /// A pool for `max_sessions` live sessions, with the default sizes listed on [`Pooling`].
    pub fn new(max_sessions: u32) -> Pooling {
        Pooling {
            max_sessions,
            core_instances_per_session: 16,
            memories_per_session: 2,
            tables_per_session: 16,
            table_elements: 20_000,
            keep_memory_resident: 0,
            keep_stack_resident: 0,
        }
    }

    /// Set the core instances one session may hold.
    pub fn core_instances_per_session(mut self, n: u32) -> Pooling {
        self.core_instances_per_session = n;
        self
    }

    /// Set the linear memories one session may hold.
    pub fn memories_per_session(mut self, n: u32) -> Pooling {
        self.memories_per_session = n;
        self
    }

    /// Set the tables one session may hold.
    pub fn tables_per_session(mut self, n: u32) -> Pooling {
        self.tables_per_session = n;
        self
    }

    /// Set the largest table, in elements.
    pub fn table_elements(mut self, n: u32) -> Pooling {
        self.table_elements = n;
        self
    }

    /// Keep the first `bytes` of each linear memory slot resident between sessions (reset
    /// with `memset`). See "Keeping slots warm" on [`Pooling`].
    pub fn keep_memory_resident(mut self, bytes: usize) -> Pooling {
        self.keep_memory_resident = bytes;
        self
    }

    /// Keep the first `bytes` of each fiber stack resident between sessions (reset with
    /// `memset`). See "Keeping slots warm" on [`Pooling`].
    pub fn keep_stack_resident(mut self, bytes: usize) -> Pooling {
        self.keep_stack_resident = bytes;
        self
    }
}

/// What one session of a plugin takes from a pool, read from its binary (a component or a
/// core module) without compiling it: see [`PoolNeeds::of`] and [`Pooling::fitting`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PoolNeeds {
    /// Core module instantiations (a core module is one).
    pub core_instances: u32,
    /// Linear memories the plugin defines (imported ones live in another instance's slot).
    pub memories: u32,
    /// Tables the plugin defines.
    pub tables: u32,
    /// The largest initial table size, in elements.
    pub table_elements: u64,
}

impl PoolNeeds {
    /// Count what `wasm` (a component, nested components included, or a core module) needs
    /// per session. Conservative where the binary alone cannot tell: a module's memories and
    /// tables are counted once, as every toolchain here instantiates each module once.
    pub fn of(wasm: &[u8]) -> Result<PoolNeeds, wasmparser::BinaryReaderError> {
        use wasmparser::{Instance, Parser, Payload};
        let mut needs = PoolNeeds::default();
        let mut is_component = false;
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::Version {
                    encoding: wasmparser::Encoding::Component,
                    ..
                } => is_component = true,
                Payload::InstanceSection(reader) => {
                    for instance in reader {
                        if matches!(instance?, Instance::Instantiate { .. }) {
                            needs.core_instances += 1;
                        }
                    }
                }
                Payload::MemorySection(reader) => needs.memories += reader.count(),
                Payload::TableSection(reader) => {
                    for table in reader {
                        let table = table?;
                        needs.tables += 1;
                        needs.table_elements = needs.table_elements.max(table.ty.initial);
                    }
                }
                _ => {}
            }
        }
        if !is_component {
            needs.core_instances = 1;
        }
        Ok(needs)
    }
}

impl Pooling {
    /// A pool for `max_sessions` sessions of the plugin `wasm`: each per-session size is the
    /// default of [`Pooling::new`] or what [`PoolNeeds::of`] finds, whichever is larger, so a
    /// componentize-py or componentize-js component starts where a small fixed pool would
    /// refuse it at instantiation.
    pub fn fitting(
        max_sessions: u32,
        wasm: &[u8],
    ) -> Result<Pooling, wasmparser::BinaryReaderError> {
        let needs = PoolNeeds::of(wasm)?;
        let base = Pooling::new(max_sessions);
        Ok(base
            .core_instances_per_session(base.core_instances_per_session.max(needs.core_instances))
            .memories_per_session(base.memories_per_session.max(needs.memories))
            .tables_per_session(base.tables_per_session.max(needs.tables))
            .table_elements(
                base.table_elements
                    .max(u32::try_from(needs.table_elements).unwrap_or(u32::MAX)),
            ))
    }

    /// Whether one session of a plugin needing `needs` fits this pool; else the first limit
    /// it exceeds, as (what, needed, allowed).
    pub fn check(&self, needs: &PoolNeeds) -> Result<(), (&'static str, u64, u64)> {
        let checks = [
            (
                "core instances",
                u64::from(needs.core_instances),
                u64::from(self.core_instances_per_session),
            ),
            (
                "memories",
                u64::from(needs.memories),
                u64::from(self.memories_per_session),
            ),
            (
                "tables",
                u64::from(needs.tables),
                u64::from(self.tables_per_session),
            ),
            (
                "table elements",
                needs.table_elements,
                u64::from(self.table_elements),
            ),
        ];
        match checks.into_iter().find(|(_, need, allowed)| need > allowed) {
            Some(over) => Err(over),
            None => Ok(()),
        }
    }
}

/// The wasmtime strategy for `allocator`.
pub(super) fn strategy(allocator: &InstanceAllocator) -> InstanceAllocationStrategy {
    let p = match allocator {
        InstanceAllocator::OnDemand => return InstanceAllocationStrategy::OnDemand,
        InstanceAllocator::Pooling(p) => p,
    };
    let times = |per: u32| p.max_sessions.saturating_mul(per);
    let mut config = PoolingAllocationConfig::new();
    config
        .total_component_instances(p.max_sessions)
        .total_core_instances(times(p.core_instances_per_session))
        .total_memories(times(p.memories_per_session))
        .total_tables(times(p.tables_per_session))
        // One fiber stack per running guest: every session runs on its own.
        .total_stacks(p.max_sessions)
        .max_core_instances_per_component(p.core_instances_per_session)
        .max_memories_per_component(p.memories_per_session)
        .max_tables_per_component(p.tables_per_session)
        .table_elements(usize::try_from(p.table_elements).unwrap_or(usize::MAX))
        .linear_memory_keep_resident(p.keep_memory_resident)
        .async_stack_keep_resident(p.keep_stack_resident);
    InstanceAllocationStrategy::Pooling(config)
}
