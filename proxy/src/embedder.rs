//! The local embedding model of the semantic tier, loaded the first time an organization's
//! requests need it rather than at start: its weights are most of the process's memory (about
//! 90 MiB), and most deployments never turn L3 on.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use gw_shared::cache::embed::{LocalEmbedder, LOCAL_MODEL};
use tokio::sync::Notify;

pub struct Embedder {
    dir: PathBuf,
    /// The model's files are there (checked once at start).
    present: bool,
    loading: AtomicBool,
    /// `None` once a load failed: L3 stays off in this process, as it would without the files.
    loaded: Arc<OnceLock<Option<Arc<LocalEmbedder>>>>,
    ready: Arc<Notify>,
}

impl Embedder {
    pub fn new(dir: &str) -> Self {
        let dir = PathBuf::from(dir);
        let present = dir.join("model.safetensors").exists();
        if !present {
            log::warn!("no local embedding model in {}: the semantic cache tier (L3) is unavailable", dir.display());
        }
        Self {
            dir,
            present,
            loading: AtomicBool::new(false),
            loaded: Arc::new(OnceLock::new()),
            ready: Arc::new(Notify::new()),
        }
    }

    /// Whether semantic lookups can run here. The first call starts loading the model in the
    /// background, so an organization turning L3 on is what brings it into memory.
    pub fn prepare(&self) -> bool {
        match self.loaded.get() {
            Some(model) => model.is_some(),
            None if self.present => {
                self.start();
                true
            }
            None => false,
        }
    }

    /// The model, once loaded (waiting for a load under way); `None` when it cannot be.
    pub async fn get(&self) -> Option<Arc<LocalEmbedder>> {
        if !self.present {
            return None;
        }
        self.start();
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            // Registered before looking, so a load finishing in between still wakes us.
            notified.as_mut().enable();
            if let Some(model) = self.loaded.get() {
                return model.clone();
            }
            notified.await;
        }
    }

    fn start(&self) {
        if self.loading.swap(true, Ordering::AcqRel) {
            return;
        }
        let (dir, loaded, ready) = (self.dir.clone(), self.loaded.clone(), self.ready.clone());
        // A thread of its own: it reads and parses ~90 MiB, and nothing waiting on it (a lookup
        // within its time bound, a store in the background) holds up a runtime thread.
        let spawned = std::thread::Builder::new().name("embedding-load".into()).spawn(move || {
            let started = Instant::now();
            let model = match LocalEmbedder::load(&dir) {
                Ok(m) => {
                    log::info!("loaded {LOCAL_MODEL} from {} in {:?}", dir.display(), started.elapsed());
                    Some(Arc::new(m))
                }
                Err(e) => {
                    log::error!("cannot load the local embedding model from {}: {e}; L3 is unavailable", dir.display());
                    None
                }
            };
            let _ = loaded.set(model);
            ready.notify_waiters();
        });
        if let Err(e) = spawned {
            log::error!("cannot start loading the local embedding model: {e}; L3 is unavailable");
            let _ = self.loaded.set(None);
            self.ready.notify_waiters();
        }
    }
}
