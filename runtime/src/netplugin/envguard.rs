//! Keeping a plugin's `init` from changing jitccl's settings: some plugins set variables of
//! the host in the process (aws-ofi-nccl sets `NCCL_PROTO`), which would silently change
//! what jitccl reads afterwards (its protocol choice). Every variable of the settings table
//! is read before the call and put back after it, with a warning naming the plugin and the
//! variable.

use std::ffi::OsString;

use crate::settings;

/// The values of every variable jitccl reads, as they were.
pub(super) struct Snapshot(Vec<(&'static str, Option<OsString>)>);

impl Snapshot {
    pub fn take() -> Snapshot {
        Snapshot(settings::ALL.iter().flat_map(|s| s.names()).map(|n| (n, std::env::var_os(n))).collect())
    }

    /// Puts back what `plugin` changed; returns the variables it had changed.
    pub fn restore(self, plugin: &str) -> Vec<&'static str> {
        let mut changed = Vec::new();
        for (name, was) in self.0 {
            let now = std::env::var_os(name);
            if now == was {
                continue;
            }
            let show = |v: &Option<OsString>| v.as_ref().map_or("unset".to_string(), |v| format!("{v:?}"));
            tracing::warn!(
                "NET/Plugin: {plugin} changed {name} during its init (from {} to {}); put back, so jitccl's own \
                 setting stands",
                show(&was),
                show(&now)
            );
            // The plugin's own change went through the same call; this undoes it before
            // any reader of the settings runs (selection holds the plugin lock).
            match &was {
                Some(v) => std::env::set_var(name, v),
                None => std::env::remove_var(name),
            }
            changed.push(name);
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Variables of the table that no library code reads during the unit tests.
    const VAR: &str = "JITCCL_TORCH_VICTIM";
    const ALIAS_FREE: &str = "JITCCL_TORCH_KILL_AT";

    #[test]
    fn nccl_proto_and_jitccl_proto_are_kept() {
        let names: Vec<&str> = Snapshot::take().0.iter().map(|(n, _)| *n).collect();
        assert!(names.contains(&"NCCL_PROTO") && names.contains(&"JITCCL_PROTO"), "{names:?}");
    }

    /// In a child process: the test stands for a plugin that changes the environment.
    #[test]
    fn what_a_plugin_sets_or_removes_is_put_back_and_named() {
        let vars = [(VAR, None), (ALIAS_FREE, Some("3")), ("OTHER_T_NOT_A_SETTING", None)];
        jitccl_plugins::in_child(module_path!(), "what_a_plugin_sets_or_removes_is_put_back_and_named", &vars, || {
            let snap = Snapshot::take();
            std::env::set_var(VAR, "simple");
            std::env::remove_var(ALIAS_FREE);
            std::env::set_var("OTHER_T_NOT_A_SETTING", "x");
            let mut changed = snap.restore("Stand-in");
            changed.sort();
            assert_eq!(changed, [ALIAS_FREE, VAR]);
            assert_eq!(std::env::var_os(VAR), None);
            assert_eq!(std::env::var(ALIAS_FREE).as_deref(), Ok("3"));
            assert_eq!(std::env::var("OTHER_T_NOT_A_SETTING").as_deref(), Ok("x"), "only jitccl's own are kept");
            assert!(Snapshot::take().restore("Stand-in").is_empty(), "nothing changed, nothing said");
        });
    }
}
