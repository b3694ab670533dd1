//! Reload triggers and the warm-up watcher, run by [`watch_triggers`] (spawned by the server,
//! ended by the shutdown signal): file changes (notify, debounced), `SIGHUP`, and every
//! [`WARMUP_CHECK_INTERVAL`] the warm-up error-rate check that rolls a bad table back
//! (SPEC section 6). `POST /admin/reload` calls [`Routing::reload`] directly.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::time::Instant;

use super::reload::{ReloadTrigger, Routing};
use super::sources::TriggerSources;
use super::warmup::{MIN_ROLLBACK_SAMPLE, WARMUP_CHECK_INTERVAL};
use crate::watch::Trigger;

/// Runs the warm-up watcher until `watch` fires: every [`WARMUP_CHECK_INTERVAL`], a live table
/// with a warm-up whose error rate is above `max_error_rate` (with at least
/// [`MIN_ROLLBACK_SAMPLE`] requests) is rolled back (SPEC section 6).
pub(crate) async fn watch_warmup(routing: Arc<Routing>, mut watch: crate::drain::Watch) {
    let mut tick = tokio::time::interval(WARMUP_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = watch.signaled() => return,
            _ = tick.tick() => {}
        }
        let table = routing.table();
        let Some(b) = table.warmup_breach(Instant::now(), MIN_ROLLBACK_SAMPLE) else {
            continue;
        };
        tracing::warn!(
            generation = table.generation,
            subject = %b.subject,
            requests = b.outcomes.requests,
            errors = b.outcomes.errors,
            error_rate = b.outcomes.rate(),
            max_error_rate = b.max_error_rate,
            "warm-up error rate above max_error_rate; rolling back the route table"
        );
        match routing.rollback_from(table.generation, "rolled_back").await {
            Ok(Some(_)) | Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "warm-up rollback impossible; the table stays"),
        }
    }
}

/// Runs the reload triggers and the warm-up watcher ([`watch_warmup`]) until `watch` fires.
/// Triggers: SIGHUP and changes to the config file (watched through its directory so editors
/// that replace the file are seen, debounced by [`crate::watch::FILE_DEBOUNCE`]); they coalesce in
/// [`Routing::reload_from`]. The sources are the ones [`Routing::new`] set up; `file` is only
/// used if they were already taken (a second call).
pub(crate) async fn watch_triggers(
    routing: Arc<Routing>,
    file: Option<PathBuf>,
    watch: crate::drain::Watch,
) {
    let sources = routing
        .take_trigger_sources()
        .unwrap_or_else(|| TriggerSources::new(file.as_deref()));
    tokio::join!(
        reload_triggers(routing.clone(), sources, watch.clone()),
        watch_warmup(routing, watch)
    );
}

async fn reload_triggers(
    routing: Arc<Routing>,
    mut sources: TriggerSources,
    mut watch: crate::drain::Watch,
) {
    loop {
        let trigger = tokio::select! {
            _ = watch.signaled() => return,
            t = sources.0.next() => match t {
                Trigger::File => ReloadTrigger::File,
                Trigger::Signal => ReloadTrigger::Signal,
            },
        };
        match routing.reload_from(trigger).await {
            Ok(g) => tracing::debug!(?trigger, generation = g, "reload trigger handled"),
            // Already logged (and counted) where it was refused.
            Err(e) => tracing::debug!(?trigger, error = %e, "reload trigger refused"),
        }
    }
}
