//! The response cache's tiers. L1 lives in this process (moka, bounded in bytes, each entry with
//! its own TTL); L2 in Redis (shared by every replica, compressed, TTL); L3 in PostgreSQL (the
//! nearest earlier prompt by pgvector cosine distance, above a threshold). A lookup walks
//! L1 → L2 → L3, each tier within its time bound, and never fails a request: a tier that errs
//! or is slow is a miss. Answers reach L1 at once and L2/L3 through a bounded queue that a
//! background task drains, off the request path.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use gw_shared::cache::entry::{Entry, MAX_BODY};
use gw_shared::cache::key::{CacheKey, ModelTag, SemanticKey};
use gw_shared::cache::settings::{Directives, Effective};
use gw_shared::cache::verify;
use gw_shared::cache::CacheStatus;
use gw_shared::db::{cache as db_cache, DbPool};
use gw_shared::redis::{ConnOptions, Pool};
use moka::future::Cache;
use moka::Expiry;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::{mpsc, Semaphore};
use uuid::Uuid;

use crate::embedder::Embedder;
use crate::logline::RateLimitedLog;
use crate::metrics::Metrics;

/// How long L2 is left alone after Redis failed a lookup: a stopped Redis costs one timeout a
/// second, not one per request.
const L2_BACKOFF: Duration = Duration::from_secs(1);
/// Prompts embedded at once, at most; more wait (within the L3 time bound) rather than pile
/// onto the cores the proxy serves from.
const EMBED_SLOTS: usize = 2;
/// Neighbours above the threshold checked for the same question, nearest first.
const NEIGHBOURS: i64 = 5;

/// What the cache step decided for one request.
#[derive(Debug, Clone)]
pub struct Plan {
    pub key: CacheKey,
    pub model: String,
    pub settings: Effective,
    pub directives: Directives,
    /// The semantic key, when L3 is on and the request has a prompt to embed.
    pub semantic: Option<SemanticKey>,
    /// The prompt's embedding, once computed (a miss stores it with the answer).
    pub embedding: Option<Arc<Vec<f32>>>,
}

impl Plan {
    pub fn ttl(&self) -> Duration {
        self.directives.ttl_within(self.settings.ttl)
    }
}

pub struct Hit {
    pub tier: CacheStatus,
    pub entry: Arc<Entry>,
    pub similarity: Option<f32>,
}

/// An L1 entry: the answer and what purges and expiry need to know of it.
struct Cached {
    entry: Arc<Entry>,
    org_id: Uuid,
    model: ModelTag,
    ttl: Duration,
}

struct PerEntryTtl;

impl Expiry<[u8; 32], Arc<Cached>> for PerEntryTtl {
    fn expire_after_create(&self, _key: &[u8; 32], value: &Arc<Cached>, _now: std::time::Instant) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// An answer on its way to L2 and L3.
struct Job {
    key: CacheKey,
    model: String,
    entry: Arc<Entry>,
    ttl: Duration,
    l2: bool,
    l3: Option<(SemanticKey, Option<Arc<Vec<f32>>>)>,
}

pub struct CacheConfig {
    /// The Redis settings (L2 lives at `cache_url`, else in the main Redis).
    pub redis: gw_shared::config::RedisConfig,
    /// Bytes of live L2 entries per organization (0: no bound).
    pub l2_org_max_bytes: u64,
    pub l1_max_bytes: u64,
    pub l2_timeout: Duration,
    pub l3_timeout: Duration,
    pub queue: usize,
}

pub struct ResponseCache {
    l1: Cache<[u8; 32], Arc<Cached>>,
    /// An answer heavier than the whole tier is not offered to it.
    l1_max_bytes: u64,
    redis: gw_shared::config::RedisConfig,
    l2_budget: gw_shared::cache::l2_budget::L2Budget,
    /// The request path's Redis connections, made by the first request that needs one (their
    /// drivers then run on the worker runtime, as the limiter's do). None: no usable Redis.
    hot: Option<Pool>,
    /// Milliseconds since `epoch` until which L2 is skipped.
    l2_down_until: AtomicI64,
    epoch: Instant,
    l2_timeout: Duration,
    l3_timeout: Duration,
    db: DbPool,
    /// Where semantic lookups read: the replica (`database.read_url`) when there is one. An entry
    /// stored moments ago may not be there yet (a miss, never a wrong answer).
    read_db: DbPool,
    embedder: Embedder,
    embed_slots: Arc<Semaphore>,
    jobs: mpsc::Sender<Job>,
    jobs_rx: tokio::sync::Mutex<mpsc::Receiver<Job>>,
    metrics: Arc<Metrics>,
    log: RateLimitedLog,
}

impl ResponseCache {
    pub fn new(
        cfg: CacheConfig,
        db: DbPool,
        read_db: Option<DbPool>,
        embedder: Embedder,
        metrics: Arc<Metrics>,
    ) -> Self {
        let l1 = Cache::builder()
            .max_capacity(cfg.l1_max_bytes)
            .weigher(|_k: &[u8; 32], v: &Arc<Cached>| u32::try_from(v.entry.weight()).unwrap_or(u32::MAX))
            .expire_after(PerEntryTtl)
            .support_invalidation_closures()
            .build();
        let (jobs, jobs_rx) = mpsc::channel(cfg.queue.max(1));
        Self {
            l1,
            l1_max_bytes: cfg.l1_max_bytes,
            hot: connect(&cfg.redis, cfg.l2_timeout, 2)
                .map_err(|e| log::error!("cannot set up the response cache's Redis connection: {e}; L2 is off"))
                .ok(),
            redis: cfg.redis,
            l2_budget: gw_shared::cache::l2_budget::L2Budget::new(cfg.l2_org_max_bytes),
            l2_down_until: AtomicI64::new(0),
            epoch: Instant::now(),
            l2_timeout: cfg.l2_timeout,
            l3_timeout: cfg.l3_timeout,
            read_db: read_db.unwrap_or_else(|| db.clone()),
            db,
            embedder,
            embed_slots: Arc::new(Semaphore::new(EMBED_SLOTS)),
            jobs,
            jobs_rx: tokio::sync::Mutex::new(jobs_rx),
            metrics,
            log: RateLimitedLog::new(module_path!(), Duration::from_secs(5)),
        }
    }

    /// Whether semantic lookups can run here (the local model's files are there and did not fail
    /// to load). Asked only for organizations with L3 on: the first ask loads the model.
    pub fn semantic_ready(&self) -> bool {
        self.embedder.prepare()
    }

    /// Looks the request up, tier by tier; `None` is a miss.
    pub async fn lookup(&self, plan: &mut Plan) -> Option<Hit> {
        if plan.settings.l1 {
            let started = Instant::now();
            let found = self.l1.get(&plan.key.digest).await;
            self.observe("L1", started);
            if let Some(c) = found {
                return Some(Hit { tier: CacheStatus::L1, entry: c.entry.clone(), similarity: None });
            }
        }
        if plan.settings.l2 {
            if let Some((entry, ttl)) = self.l2_get(&plan.key).await {
                let entry = Arc::new(entry);
                self.fill_l1(plan, entry.clone(), ttl).await;
                return Some(Hit { tier: CacheStatus::L2, entry, similarity: None });
            }
        }
        if plan.settings.l3 && plan.semantic.is_some() {
            if let Some((similarity, entry, ttl)) = self.l3_get(plan).await {
                let entry = Arc::new(entry);
                self.fill_l1(plan, entry.clone(), ttl).await;
                return Some(Hit { tier: CacheStatus::L3, entry, similarity: Some(similarity) });
            }
        }
        None
    }

    fn fits_l1(&self, entry: &Entry) -> bool {
        entry.weight() as u64 <= self.l1_max_bytes
    }

    async fn fill_l1(&self, plan: &Plan, entry: Arc<Entry>, ttl: Duration) {
        if plan.settings.l1 && !ttl.is_zero() && self.fits_l1(&entry) {
            let cached = Cached { entry, org_id: plan.key.org_id, model: plan.key.model, ttl };
            self.l1.insert(plan.key.digest, Arc::new(cached)).await;
        }
    }

    fn observe(&self, tier: &str, started: Instant) {
        self.metrics.cache_lookup_duration.with_label_values(&[tier]).observe(started.elapsed().as_secs_f64());
    }

    fn error(&self, tier: &'static str, what: &str) {
        self.metrics.cache_errors.with_label_values(&[tier]).inc();
        self.log.warn(|| format!("response cache {tier}: {what}"));
    }

    fn now_ms(&self) -> i64 {
        i64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    async fn l2_get(&self, key: &CacheKey) -> Option<(Entry, Duration)> {
        if self.now_ms() < self.l2_down_until.load(Ordering::Relaxed) {
            return None;
        }
        let pool = self.hot.as_ref()?;
        let started = Instant::now();
        let redis_key = key.redis_key();
        let mut pipe = redis::pipe();
        pipe.get(&redis_key).cmd("PTTL").arg(&redis_key);
        let get = async {
            let mut conn = pool.get().await.map_err(|e| e.to_string())?;
            pipe.query_async::<(Option<Vec<u8>>, i64)>(&mut conn).await.map_err(|e| e.to_string())
        };
        let answer = tokio::time::timeout(self.l2_timeout, get).await;
        self.observe("L2", started);
        match answer {
            Ok(Ok((Some(data), pttl))) => match Entry::decode(&data) {
                Ok(entry) => Some((entry, Duration::from_millis(u64::try_from(pttl).unwrap_or(0)))),
                Err(e) => {
                    self.error("L2", &e.to_string());
                    None
                }
            },
            Ok(Ok((None, _))) => None,
            Ok(Err(e)) => {
                self.l2_down(&e.to_string());
                None
            }
            Err(_) => {
                self.l2_down("no answer in time");
                None
            }
        }
    }

    fn l2_down(&self, why: &str) {
        self.l2_down_until.store(self.now_ms() + L2_BACKOFF.as_millis() as i64, Ordering::Relaxed);
        self.error("L2", &format!("Redis: {why}; skipping L2 for {L2_BACKOFF:?}"));
    }

    /// Embeds the prompt (kept in the plan for the store) and asks PostgreSQL for the nearest
    /// entry in scope, all within the L3 time bound.
    async fn l3_get(&self, plan: &mut Plan) -> Option<(f32, Entry, Duration)> {
        let started = Instant::now();
        let result = tokio::time::timeout(self.l3_timeout, self.l3_query(plan)).await;
        self.observe("L3", started);
        match result {
            Ok(Ok(found)) => found,
            Ok(Err(e)) => {
                self.error("L3", &e);
                None
            }
            Err(_) => {
                self.error("L3", "no answer in time");
                None
            }
        }
    }

    async fn l3_query(&self, plan: &mut Plan) -> Result<Option<(f32, Entry, Duration)>, String> {
        let Some(semantic) = plan.semantic.clone() else { return Ok(None) };
        let Some(embedding) = self.embed(&semantic.prompt).await? else { return Ok(None) };
        plan.embedding = Some(embedding.clone());
        let mut conn = self.read_db.get().await.map_err(|e| e.to_string())?;
        let near = db_cache::nearest(
            &mut conn,
            plan.key.org_id,
            &semantic.scope,
            &embedding,
            plan.settings.threshold,
            NEIGHBOURS,
        )
        .await
        .map_err(|e| e.to_string())?;
        // The nearest vector may ask another question ("from London to Paris" and back): the
        // first neighbour that asks the same one answers.
        let asked = verify::terms(&semantic.prompt);
        let Some(n) = near.into_iter().find(|n| verify::same_question(&asked, &verify::terms(&n.prompt))) else {
            return Ok(None);
        };
        let entry = Entry::decode(&n.answer).map_err(|e| e.to_string())?;
        Ok(Some((n.similarity, entry, Duration::from_secs_f64(n.ttl_secs.max(0.0)))))
    }

    /// The prompt's embedding; `None` when the prompt is too long to embed faithfully.
    async fn embed(&self, prompt: &str) -> Result<Option<Arc<Vec<f32>>>, String> {
        let Some(embedder) = self.embedder.get().await else {
            return Err("the local embedding model is not loaded (GW_EMBEDDING_MODEL_DIR)".into());
        };
        if prompt.len() > gw_shared::cache::embed::MAX_PROMPT_BYTES {
            return Ok(None);
        }
        // The slot goes with the work: a lookup that times out stops waiting, but the blocking
        // embedding it started holds its slot until it ends, so slots bound the work itself.
        let slot = self.embed_slots.clone().acquire_owned().await.map_err(|e| e.to_string())?;
        let prompt = prompt.to_string();
        let started = Instant::now();
        let result = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            embedder.embed(&prompt)
        })
        .await
        .map_err(|e| e.to_string())?;
        self.metrics.cache_embedding.observe(started.elapsed().as_secs_f64());
        match result {
            Ok(v) => Ok(Some(Arc::new(v))),
            Err(gw_shared::cache::embed::EmbedError::TooLong) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Keeps a successful, complete answer: in L1 now, in L2 and L3 soon.
    pub async fn store(&self, plan: &Plan, entry: Entry) {
        if !plan.directives.store || entry.body.len() > MAX_BODY {
            return;
        }
        let entry = Arc::new(entry);
        let ttl = plan.ttl();
        if plan.settings.l1 && self.fits_l1(&entry) {
            let cached = Cached { entry: entry.clone(), org_id: plan.key.org_id, model: plan.key.model, ttl };
            self.l1.insert(plan.key.digest, Arc::new(cached)).await;
            self.metrics.cache_stores.with_label_values(&["L1", "ok"]).inc();
        }
        let l3 = match (&plan.semantic, plan.settings.l3) {
            (Some(s), true) => Some((s.clone(), plan.embedding.clone())),
            _ => None,
        };
        if !plan.settings.l2 && l3.is_none() {
            return;
        }
        let job = Job { key: plan.key, model: plan.model.clone(), entry, ttl, l2: plan.settings.l2, l3 };
        if self.jobs.try_send(job).is_err() {
            self.metrics.cache_stores.with_label_values(&["queue", "dropped"]).inc();
        }
    }

    /// Forgets an organization's entries in this replica (all, or one model's).
    pub fn purge_local(&self, org_id: Uuid, model: Option<ModelTag>) {
        let purged =
            self.l1.invalidate_entries_if(move |_, c| c.org_id == org_id && model.is_none_or(|m| c.model == m));
        if let Err(e) = purged {
            log::warn!("response cache purge: {e}; clearing L1");
            self.l1.invalidate_all();
        }
    }

    pub fn clear_local(&self) {
        self.l1.invalidate_all();
    }

    async fn write(&self, pool: &Option<Pool>, job: Job) {
        let data = match job.entry.encode() {
            Ok(d) => d,
            Err(e) => {
                self.metrics.cache_stores.with_label_values(&["L2", "error"]).inc();
                self.log.warn(|| format!("response cache: {e}"));
                return;
            }
        };
        if job.l2 {
            let outcome = match pool {
                Some(pool) => {
                    let ms = u64::try_from(job.ttl.as_millis()).unwrap_or(u64::MAX).max(1);
                    let set = async {
                        let mut c = pool.get().await.map_err(|e| e.to_string())?;
                        self.l2_budget.store(&mut c, &job.key, &data, ms).await.map_err(|e| e.to_string())
                    };
                    match tokio::time::timeout(self.l2_timeout * 4, set).await {
                        Ok(Ok(true)) => "ok",
                        // The organization's share of L2 is full: L1 and L3 still have it.
                        Ok(Ok(false)) => "over_budget",
                        _ => "error",
                    }
                }
                None => "error",
            };
            self.metrics.cache_stores.with_label_values(&["L2", outcome]).inc();
        }
        if let Some((semantic, embedding)) = job.l3 {
            let outcome = match self.write_l3(&job.key, &job.model, semantic, embedding, &data, job.ttl).await {
                Ok(()) => "ok",
                Err(e) => {
                    self.log.warn(|| format!("response cache L3 store: {e}"));
                    "error"
                }
            };
            self.metrics.cache_stores.with_label_values(&["L3", outcome]).inc();
        }
    }

    async fn write_l3(
        &self,
        key: &CacheKey,
        model: &str,
        semantic: SemanticKey,
        embedding: Option<Arc<Vec<f32>>>,
        data: &[u8],
        ttl: Duration,
    ) -> Result<(), String> {
        // A `no-cache` request skipped the lookup, so its prompt is embedded here.
        let embedding = match embedding {
            Some(e) => e,
            None => match self.embed(&semantic.prompt).await? {
                Some(e) => e,
                None => return Ok(()),
            },
        };
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        let row = db_cache::NewSemantic {
            id: gw_shared::ids::new_id(),
            org_id: key.org_id,
            model,
            scope: &semantic.scope,
            embedding: embedding.to_vec(),
            prompt: &semantic.prompt,
            answer: data,
            ttl,
        };
        db_cache::insert_semantic(&mut conn, row).await.map_err(|e| e.to_string())
    }
}

fn connect(cfg: &gw_shared::config::RedisConfig, timeout: Duration, connections: usize) -> gw_shared::Result<Pool> {
    let timeout = (timeout * 4).max(Duration::from_millis(200));
    Pool::cache_from_config(cfg, ConnOptions { connections, connect_timeout: timeout, response_timeout: timeout })
}

/// Drains the store queue into L2 and L3.
pub struct CacheWriter(pub Arc<ResponseCache>);

#[async_trait]
impl BackgroundService for CacheWriter {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let cache = &self.0;
        let mut rx = cache.jobs_rx.lock().await;
        let pool = connect(&cache.redis, cache.l2_timeout, 1).ok();
        loop {
            tokio::select! {
                job = rx.recv() => match job {
                    Some(job) => cache.write(&pool, job).await,
                    None => return,
                },
                _ = shutdown.changed() => return,
            }
        }
    }
}
