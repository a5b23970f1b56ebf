//! What the figures were measured on: the CPU, the date, and how busy the machine was with
//! work other than the benchmark.

use std::process::Command;

/// `model name` from /proc/cpuinfo, or "unknown CPU".
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

/// CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The kernel release, or "unknown".
pub fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The date and time now, in UTC, as `date -u` prints it.
pub fn now_utc() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            format!("unix time {secs}")
        })
}

/// The 1-minute load average, as /proc/loadavg gives it.
pub fn load1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU time counters (USER_HZ ticks): busy and total over all CPUs from /proc/stat, and the
/// time of this process's waited-for children from /proc/self/stat.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTicks {
    busy: u64,
    total: u64,
    children: u64,
}

impl CpuTicks {
    pub fn now() -> Option<CpuTicks> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is inside user).
        let total: u64 = cpu.iter().take(8).sum();
        let idle = cpu.get(3)? + cpu.get(4).copied().unwrap_or(0);
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the parenthesised command name; cutime and cstime are fields 16 and 17.
        let after = own.rsplit_once(')')?.1;
        let fields: Vec<&str> = after.split_whitespace().collect();
        let children =
            fields.get(13)?.parse::<u64>().ok()? + fields.get(14)?.parse::<u64>().ok()?;
        Some(CpuTicks {
            busy: total - idle,
            total,
            children,
        })
    }

    /// CPUs' worth of work that was not the benchmark (nor its children) between `self` and
    /// `later`, e.g. 0.9 means other processes kept almost one CPU busy.
    pub fn other_load(&self, later: &CpuTicks, cpus: usize) -> Option<f64> {
        let total = later.total.checked_sub(self.total)?;
        if total == 0 {
            return None;
        }
        let busy = later.busy.checked_sub(self.busy)?;
        let ours = later.children.checked_sub(self.children)?;
        Some(busy.saturating_sub(ours) as f64 / total as f64 * cpus as f64)
    }
}
