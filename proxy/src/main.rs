//! gw-proxy with the built-in provider adapters.

use gw_shared::config::Config;
use gw_shared::providers::Registry;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let result = Config::load().map_err(|e| e.into()).and_then(|cfg| gw_proxy::run(cfg, Registry::builtin()));
    if let Err(e) = result {
        log::error!("gw-proxy failed to start: {e}");
        std::process::exit(1);
    }
}
