use super::*;
use gw_shared::audit::AuditRecord;

fn entry(n: u32) -> AuditEntry {
    let json = serde_json::json!({
        "id": uuid::Uuid::now_v7(), "org_id": uuid::Uuid::nil(), "team_id": null, "api_key_id": null,
        "endpoint": "/v1/chat/completions", "model": "m", "provider": null, "upstream_model": null,
        "status_code": 200, "error_type": null, "stream": false, "prompt_tokens": n, "completion_tokens": 0,
        "total_tokens": n, "cost_usd": "0.1", "latency_ms": 1, "upstream_latency_ms": null, "ttft_ms": null,
        "cache_status": "miss", "policy_action": null, "attempts": 0, "created_at": "2026-11-24T00:00:00Z",
        "cached_tokens": 0, "reasoning_tokens": 0, "cache_creation_tokens": 0, "routing": [], "policy": [],
        "cache_saved_usd": "0", "cache_similarity": null, "deployment": null, "overhead_us": null,
        "client_ip": null, "user_agent_id": null, "request_body": null, "response_body": null,
        "chain_seq": null, "prev_hash": null, "row_hash": null
    });
    let record: AuditRecord = serde_json::from_value(json).unwrap();
    AuditEntry { record, user_agent: Some("ua".into()) }
}

fn dir() -> PathBuf {
    std::env::temp_dir().join(format!("gw-spool-test-{}", uuid::Uuid::new_v4().simple()))
}

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new().unwrap())
}

fn tokens(t: &Taken) -> Vec<i32> {
    t.entries.iter().map(|e| e.record.prompt_tokens).collect()
}

#[test]
fn frames_replay_in_order_and_the_spool_empties() {
    let d = dir();
    let spool = Spool::open(&d, 1 << 20, metrics()).unwrap();
    assert!(spool.is_empty());
    spool.append(&[entry(1), entry(2)]).unwrap();
    spool.append(&[entry(3)]).unwrap();
    assert!(!spool.is_empty());
    let t = spool.take(2).unwrap().unwrap();
    assert_eq!(tokens(&t), vec![1, 2]);
    // Not marked done: taken again.
    let again = spool.take(10).unwrap().unwrap();
    assert_eq!(tokens(&again), vec![1, 2, 3]);
    spool.done(&t);
    let rest = spool.take(10).unwrap().unwrap();
    assert_eq!(tokens(&rest), vec![3]);
    spool.done(&rest);
    assert!(spool.is_empty());
    assert!(spool.take(10).unwrap().is_none());
    spool.append(&[entry(4)]).unwrap();
    assert_eq!(tokens(&spool.take(10).unwrap().unwrap()), vec![4]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_new_process_replays_what_the_last_one_left() {
    let d = dir();
    {
        let spool = Spool::open(&d, 1 << 20, metrics()).unwrap();
        spool.append(&[entry(1)]).unwrap();
        spool.append(&[entry(2)]).unwrap();
    }
    let spool = Spool::open(&d, 1 << 20, metrics()).unwrap();
    assert!(!spool.is_empty());
    spool.append(&[entry(3)]).unwrap();
    let first = spool.take(10).unwrap().unwrap();
    assert_eq!(tokens(&first), vec![1, 2]);
    spool.done(&first);
    let second = spool.take(10).unwrap().unwrap();
    assert_eq!(tokens(&second), vec![3]);
    spool.done(&second);
    assert!(spool.is_empty());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_torn_last_frame_is_discarded() {
    let d = dir();
    {
        let spool = Spool::open(&d, 1 << 20, metrics()).unwrap();
        spool.append(&[entry(1)]).unwrap();
        spool.append(&[entry(2)]).unwrap();
    }
    let seg = segment_path(&d, 1);
    let len = std::fs::metadata(&seg).unwrap().len();
    OpenOptions::new().write(true).open(&seg).unwrap().set_len(len - 5).unwrap();
    let spool = Spool::open(&d, 1 << 20, metrics()).unwrap();
    let t = spool.take(10).unwrap().unwrap();
    assert_eq!(tokens(&t), vec![1]);
    spool.done(&t);
    assert!(spool.take(10).unwrap().is_none());
    assert!(spool.is_empty());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_full_spool_refuses() {
    let d = dir();
    let spool = Spool::open(&d, 2_000, metrics()).unwrap();
    let mut refused = false;
    for i in 0..10 {
        if let Err(SpoolError::Full(_)) = spool.append(&[entry(i)]) {
            refused = true;
            break;
        }
    }
    assert!(refused);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn one_process_per_folder() {
    let d = dir();
    let _first = Spool::open(&d, 1 << 20, metrics()).unwrap();
    assert!(Spool::open(&d, 1 << 20, metrics()).is_err());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn each_process_claims_a_folder_of_its_own() {
    let root = dir();
    let first = claim(&root, 1 << 20, metrics()).unwrap();
    let second = claim(&root, 1 << 20, metrics()).unwrap();
    assert_eq!(first.dir(), root.join("0"));
    assert_eq!(second.dir(), root.join("1"));
    // The first folder freed is taken again by the next process.
    drop(first);
    let third = claim(&root, 1 << 20, metrics()).unwrap();
    assert_eq!(third.dir(), root.join("0"));
    assert!(matches!(Spool::open(&root.join("1"), 1 << 20, metrics()), Err(SpoolError::Busy(_))));
    drop((second, third));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn folders_left_with_records_are_found_and_replayed_once() {
    let root = dir();
    let own = claim(&root, 1 << 20, metrics()).unwrap();
    // A process that stopped with records in its folder; one still running with some; an empty
    // one; and records a version before instance folders left in the root.
    let gone = claim(&root, 1 << 20, metrics()).unwrap();
    gone.append(&[entry(7), entry(8)]).unwrap();
    let running = claim(&root, 1 << 20, metrics()).unwrap();
    running.append(&[entry(9)]).unwrap();
    let empty = claim(&root, 1 << 20, metrics()).unwrap();
    drop((gone, empty));
    let legacy = Spool::open(&root, 1 << 20, metrics()).unwrap();
    legacy.append(&[entry(5)]).unwrap();
    drop(legacy);

    let mut found = orphans(&root, own.dir());
    found.sort();
    assert_eq!(found, vec![root.clone(), root.join("1")]);
    // Adopted, a folder is this process's to replay; another process finds it busy meanwhile.
    let adopted = Spool::adopt(&root.join("1"), metrics()).unwrap();
    assert!(matches!(Spool::adopt(&root.join("1"), metrics()), Err(SpoolError::Busy(_))));
    let t = adopted.take(10).unwrap().unwrap();
    assert_eq!(tokens(&t), vec![7, 8]);
    adopted.done(&t);
    assert!(adopted.is_empty());
    drop(adopted);
    // A process starting now takes a free folder, a replayed one or one with leftovers alike
    // (what it finds there it replays as its own).
    // Replayed, it is no orphan any more.
    assert_eq!(orphans(&root, own.dir()), vec![root.clone()]);
    drop((own, running));
    let _ = std::fs::remove_dir_all(&root);
}
