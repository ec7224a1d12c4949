//! The invariants of the response over random batches: each failed id reported exactly once, no
//! dead-lettered id reported, never an unknown id.

use super::*;

/// What each record does in a generated batch.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fate {
    Succeed,
    Fail,
    Panic,
    Permanent,
    /// Permanent, and the dead-letter queue refuses it.
    Undeliverable,
    BadBody,
    /// Its key is held by another invocation.
    InProgress,
    /// The store fails for its key.
    StoreDown,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        8 => Just(Fate::Succeed),
        2 => Just(Fate::Fail),
        1 => Just(Fate::Panic),
        1 => Just(Fate::Permanent),
        1 => Just(Fate::Undeliverable),
        1 => Just(Fate::BadBody),
        1 => Just(Fate::InProgress),
        1 => Just(Fate::StoreDown),
    ]
}

/// The in-memory backend, failing every request for a key that ends in `down`.
#[derive(Debug, Default)]
struct Flaky(InMemoryBackend);

fn down(key: &str) -> Result<(), StoreError> {
    if key.ends_with("down") {
        return Err(StoreError::Malformed {
            key: key.into(),
            reason: "generated store failure".into(),
        });
    }
    Ok(())
}

impl Backend for Flaky {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        down(&record.key)?;
        self.0.put(record, now_ms).await
    }
    async fn get(&self, key: &str, now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.0.get(key, now_ms).await
    }
    async fn update(&self, key: &str, update: &Update, now_ms: i64) -> Result<Updated, StoreError> {
        down(key)?;
        self.0.update(key, update, now_ms).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.0.delete(key).await
    }
}

struct Generated {
    reported: Vec<String>,
    dead_lettered: Vec<String>,
    hooked: Vec<String>,
    ran: Vec<String>,
    ids: Vec<String>,
}

fn run_generated(
    spec: &[(u8, Fate, Option<usize>)],
    fifo: bool,
    strict: bool,
    near_deadline: bool,
) -> Generated {
    // A record may repeat the message id of an earlier one (same body, as SQS would deliver it).
    let mut records: Vec<SqsMessage> = Vec::new();
    let mut fates: Vec<Option<Fate>> = Vec::new();
    for (i, (group, fate, repeat)) in spec.iter().enumerate() {
        fates.push(Some(*fate));
        if let Some(r) = repeat.filter(|&r| r < records.len()) {
            fates[i] = None;
            let mut again = records[r].clone();
            if fifo {
                again
                    .attributes
                    .insert("MessageGroupId".into(), format!("g{group}"));
            }
            records.push(again);
            continue;
        }
        let id = match fate {
            Fate::StoreDown => format!("id-{i}-down"),
            _ => format!("id-{i}"),
        };
        let text = match fate {
            Fate::Succeed | Fate::InProgress | Fate::StoreDown => body(&id, 1),
            Fate::Fail => body(&id, -1),
            Fate::Panic => body(&id, 0),
            Fate::Permanent => body(&id, -2),
            Fate::Undeliverable => body(&format!("{id}-undeliverable"), -2),
            Fate::BadBody => "{".into(),
        };
        let group = format!("g{group}");
        records.push(record(&id, &text, fifo.then_some(group.as_str()), 1));
    }
    let ids: Vec<String> = records
        .iter()
        .map(|r| r.message_id.clone().unwrap())
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Idempotency::new(Arc::new(Flaky::default()));
        for (r, fate) in records.iter().zip(&fates) {
            if *fate == Some(Fate::InProgress) {
                let held = store
                    .acquire(
                        r.message_id.as_deref().unwrap(),
                        r.body.as_deref().unwrap().as_bytes(),
                        Some((SystemTime::now() + Duration::from_secs(600)).into()),
                    )
                    .await
                    .unwrap();
                assert!(matches!(held, Acquired::Started(_)));
            }
        }
        let runs = Runs::default();
        let hooked: Arc<Mutex<Vec<String>>> = Arc::default();
        let (rn, h) = (runs.clone(), hooked.clone());
        let handler = json(move |p: Payment, ctx| charge(rn.clone(), p, ctx))
            .on_dead_letter(move |dead| {
                h.lock().unwrap().push(dead.ctx.message_id);
                async {}
            })
            .idempotent(store);
        let mut e = event(records);
        if near_deadline {
            e.context.deadline =
                Deadline::from(SystemTime::now() + Duration::from_secs(1)).epoch_ms() as u64;
        }
        let report = BatchProcessor::new()
            .with_dead_letter(dead_letter_queue(&Sent::default()))
            .max_attempts(3)
            .strict_order(strict)
            .concurrency(3)
            .process(&e, &handler)
            .await
            .unwrap();
        Generated {
            reported: reported(report.response()),
            dead_lettered: report
                .dead_lettered()
                .map(|r| r.message_id.clone())
                .collect(),
            hooked: hooked.lock().unwrap().clone(),
            ran: runs
                .lock()
                .unwrap()
                .iter()
                .map(|(_, c)| c.message_id.clone())
                .collect(),
            ids,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn every_failure_is_reported_once_and_no_dead_lettered_message_is(
        spec in proptest::collection::vec((0u8..3, fate(), proptest::option::weighted(0.1, 0usize..20)), 0..20),
        fifo in any::<bool>(),
        strict in any::<bool>(),
        near_deadline in proptest::bool::weighted(0.1),
    ) {
        let g = run_generated(&spec, fifo, strict, near_deadline);
        let ids: HashSet<&String> = g.ids.iter().collect();
        let reported: HashSet<&String> = g.reported.iter().collect();
        prop_assert_eq!(reported.len(), g.reported.len(), "an id reported twice: {:?}", g.reported);
        prop_assert!(g.reported.iter().all(|id| ids.contains(id)), "an unknown id: {:?}", g.reported);
        for dead in &g.dead_lettered {
            prop_assert!(!reported.contains(dead), "dead-lettered and reported: {}", dead);
        }
        let hooked: HashSet<&String> = g.hooked.iter().collect();
        let dead: HashSet<&String> = g.dead_lettered.iter().collect();
        prop_assert_eq!(&hooked, &dead, "the hook hears of exactly the dead-lettered records");
        let ran: HashSet<&String> = g.ran.iter().collect();
        prop_assert_eq!(ran.len(), g.ran.len(), "a message id ran twice: {:?}", g.ran);
        // Model: a record not run because an earlier one of its lane failed is reported; a
        // dead-lettered one never holds up its lane.
        let mut first_seen: HashMap<&String, usize> = HashMap::new();
        let mut blocked: HashSet<String> = HashSet::new();
        for (i, id) in g.ids.iter().enumerate() {
            if first_seen.contains_key(id) { continue; }
            first_seen.insert(id, i);
            let fate = spec[i].1;
            let lane = if !fifo { format!("r{i}") } else if strict { "all".into() } else { format!("g{}", spec[i].0) };
            let expect_reported = if near_deadline || blocked.contains(&lane) {
                true
            } else {
                !matches!(fate, Fate::Succeed | Fate::Permanent | Fate::BadBody)
            };
            prop_assert_eq!(reported.contains(id), expect_reported, "{} ({:?}) in lane {}: {:?}", id, fate, lane, g.reported);
            if !near_deadline && !blocked.contains(&lane) {
                prop_assert_eq!(dead.contains(id), matches!(fate, Fate::Permanent | Fate::BadBody), "{}", id);
            }
            if expect_reported {
                blocked.insert(lane);
            }
        }
    }
}
