//! Runs the loom models of the crate (`loom_tests` modules, e.g. in `src/rt/runq.rs`) from
//! a plain `cargo test`: they need the whole crate built with `--cfg loom`, which only a
//! nested cargo with its own target directory (`<target>/loom`) can do without rebuilding
//! the normal one. The first run builds the crate and its dev-dependencies again in release
//! mode (a minute or two on two cores); later runs reuse that build.
//!
//! Every model listed in [`MODELS`] must be reported as passed.
//!
//! Set `LOOM_MAX_PREEMPTIONS` to override the models' preemption bounds,
//! `GMP_SKIP_LOOM=1` to skip.

use std::path::PathBuf;
use std::process::Command;

/// Models that must have run and passed: a filter that matches nothing (after a rename)
/// or a model dropped by a `cfg` must fail this test, not pass it silently. Add new models
/// here.
const MODELS: &[&str] = &[
    "rt::runq::loom_tests::put_get_vs_steal",
    "rt::runq::loom_tests::overflow_vs_steal",
    "rt::runq::loom_tests::runnext_vs_steal",
    "rt::runq::loom_tests::two_thieves",
    "rt::runq::loom_tests::is_empty_vs_runnext_kick",
    "rt::spinning_loom::loom_tests::spinning_no_lost_wakeup",
    "rt::spinning_loom::loom_tests::broken_without_producer_barrier",
    "rt::spinning_loom::loom_tests::resetspinning_no_lost_wakeup",
    "rt::spinning_loom::loom_tests::resetspinning_broken_without_barrier",
    "rt::spinning_loom::loom_tests::needspinning_no_lost_wakeup",
    "rt::spinning_loom::loom_tests::needspinning_broken_without_barrier",
    "rt::mailbox_loom::loom_tests::handoff_is_taken_exactly_once",
    "rt::mailbox_loom::loom_tests::broken_close_with_store",
    "rt::sysmon::loom_tests::syscall_wakes_or_is_seen",
    "rt::sysmon::loom_tests::broken_without_heavy_fence",
    "rt::sysmon::loom_tests::timer_wakes_or_is_seen",
    "rt::sysmon::loom_tests::broken_timer_without_barrier",
    "rt::sysmon::loom_tests::kick_wakes_deep_sleep_or_is_seen",
    "rt::sysmon::loom_tests::broken_deep_sleep_without_kick_recheck",
    "rt::timer::loom_tests::timer_started_while_a_timer_m_publishes_itself",
    "rt::timer::loom_tests::broken_timer_m_without_heap_reread",
    "rt::newm::loom_tests::affine_ready_wakes_timer_m_or_is_seen",
    "rt::newm::loom_tests::broken_timer_m_without_affwanted_recheck",
    "rt::syscall::loom_tests::p_passes_through_syscall_to_one_owner",
    "rt::syscall::loom_tests::broken_entersyscall_relaxed",
    "rt::sysmon::loom_tests::foreign_wait_wakes_deep_sleep_or_is_seen",
    "rt::sysmon::loom_tests::broken_deep_sleep_without_foreign_recheck",
    "rt::sigprof_loom::loom_tests::enable_races_minit",
    "rt::sigprof_loom::loom_tests::disable_races_revived_minit",
    "rt::sigprof_loom::loom_tests::enable_disable_races_minit",
    "rt::sigprof_loom::loom_tests::restart_races_revived_minit",
    "rt::sigprof_loom::loom_tests::broken_minit_disarms_unconditionally",
    "chan::waitq::loom_tests::select_foreign_claim_is_unique",
    "chan::waitq::loom_tests::select_goroutine_claim_is_unique",
    "chan::waitq::loom_tests::select_broken_without_pass3",
    "chan::waitq::loom_tests::plain_recv_exclusive_claim",
    "chan::waitq::loom_tests::plain_recv_with_deadline_claim",
    "chan::waitq::loom_tests::plain_recv_broken_exclusive_with_deadline",
    "chan::ring::loom_tests::one_slot_in_order",
    "chan::ring::loom_tests::one_slot_broken_leaving_beside_a_waiter",
    "chan::ring::loom_tests::recv_in_flight_vs_exclusive_send",
    "chan::ring::loom_tests::send_races_close",
    "chan::ring::loom_tests::remade_same_shape_try_send_races_close",
    "chan::ring::loom_tests::remade_other_shape_try_send_races_close",
    "rt::timer::loom_tests::stop_waits_for_a_running_callback",
    "rt::timer::loom_tests::stop_follows_a_moving_timer",
    "rt::timer::loom_tests::idle_p_wakes_a_timer_m_in_its_grace",
    "rt::timer::loom_tests::scoped_sleep_readied_once",
    "rt::timer::loom_tests::scoped_sleep_broken_arm_with_store",
    "rt::timer::loom_tests::scoped_sleep_broken_wake_with_store",
    "rt::netpoll_loom::loom_tests::event_timer_cancel_claim_once",
    "rt::netpoll_loom::loom_tests::evict_timer_cancel_claim_once",
    "rt::netpoll_loom::loom_tests::broken_claim_with_load_and_store",
    "rt::netpoll_loom::loom_tests::broken_without_the_lock_wait",
    "rt::schedule::loom_tests::every_claimed_timer_m_leaves_the_poll",
    "rt::schedule::loom_tests::every_claimed_timer_m_broken_without_the_second_break",
    "rt::stackhwm::loom_tests::claims_find_one_slot_per_key",
    "rt::traceevent::loom_tests::pinned_chunks_are_not_rewritten",
    "rt::traceevent::loom_tests::pinned_chunks_broken_when_unclaim_stores_zero",
    "rt::profbuf::loom_tests::every_record_arrives_once_and_whole",
    "rt::profbuf::loom_tests::broken_publish_before_the_words",
    "rt::offload::loom_tests::every_call_has_a_helper",
    "sync::mutex::loom_tests::normal_mode_excludes_and_wakes",
    "sync::mutex::loom_tests::spinner_announces_woken",
    "sync::mutex::loom_tests::starvation_hands_off",
    "sync::mutex::loom_tests::cancel_normal_mode",
    "sync::mutex::loom_tests::cancel_two_ghosts",
    "sync::mutex::loom_tests::cancel_starvation_mode",
    "sync::sema_loom::loom_tests::nwait_no_lost_wakeup",
    "sync::sema_loom::loom_tests::nwait_broken_without_waiter_barrier",
    "sync::sema_loom::loom_tests::scoped_claim_with_ghost",
    "sync::sema_loom::loom_tests::scoped_claim_without_ghost",
    "sync::sema_loom::loom_tests::scoped_claim_handoff",
    "sync::sema_loom::loom_tests::scoped_broken_cancel_stores_done",
    "sync::sema_loom::loom_tests::scoped_broken_cancel_without_parked",
    "sync::sema_loom::loom_tests::ghost_passes_the_count_on",
    "sync::sema_loom::loom_tests::ghost_requeue_sees_every_release",
    "sync::sema_loom::loom_tests::ghost_broken_keeping_the_count",
    "sync::waitgroup::loom_tests::waiters_see_every_done",
    "sync::waitgroup::loom_tests::cancelled_wait_races_done",
    "sync::waitgroup::loom_tests::cancelled_waits_race_done",
    "sync::rwmutex::loom_tests::readers_and_writers_exclude",
    "sync::cond::loom_tests::signal_wakes_each_waiter",
    "sync::cond::loom_tests::broadcast_wakes_all",
    "sys::loom_tests::note_wakeup_reaches_sleeper",
    "sys::loom_tests::note_timed_sleep_wakes_or_withdraws",
    "sys::loom_tests::lock_excludes_and_wakes",
    "sys::loom_tests::lock_asymmetric_excludes_and_wakes",
    "sys::loom_tests::lock_asymmetric_refused_barrier_polls",
    "sys::loom_tests::lock_broken_asymmetric_without_heavy_fence",
    "rt::netpoll::fdrefs::loom_tests::close_waits_for_every_op",
    "rt::netpoll::fdrefs::loom_tests::incref_after_close_fails",
    "rt::netpoll::fdrefs::loom_tests::close_broken_with_a_plain_look",
    "rt::netpoll::fdrefs::loom_tests::incref_broken_without_acquire",
    "rt::netpoll::fdrefs::loom_tests::deferred_close_is_made_once_after_every_op",
    "rt::netpoll::fdrefs::loom_tests::deferred_close_broken_without_the_claim",
];

#[test]
fn loom_models() {
    if std::env::var_os("GMP_SKIP_LOOM").is_some_and(|v| v == "1") {
        eprintln!("loom_models: skipped (GMP_SKIP_LOOM=1)");
        return;
    }
    // CARGO_TARGET_TMPDIR is <target>/tmp: put the loom build beside it.
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let target = tmp
        .parent()
        .map(|t| t.join("loom"))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/loom"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["test", "--release", "--lib", "loom_tests"])
        .env("RUSTFLAGS", "--cfg loom")
        .env("CARGO_TARGET_DIR", &target)
        // Would override RUSTFLAGS if an outer build exported it.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .expect("loom_models: cannot run cargo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(out.status.success(), "loom models failed: {}", out.status);
    let passed: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... ok"))
        .map(|name| name.trim_end_matches(" - should panic"))
        .collect();
    for model in MODELS {
        assert!(
            passed.contains(model),
            "loom model {model} did not run (ran: {passed:?})"
        );
    }
}
