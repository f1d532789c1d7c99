//! gw-proxy with the built-in provider adapters.

use gw_shared::config::Config;
use gw_shared::providers::Registry;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let mut opts = gw_proxy::RunOptions::default();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            // Take the listening sockets over from the running gw-proxy (then SIGQUIT it).
            "--upgrade" | "-u" => opts.upgrade = true,
            other => {
                log::error!("gw-proxy: unknown option {other:?} (the only option is --upgrade)");
                std::process::exit(2);
            }
        }
    }
    let result =
        Config::load().map_err(|e| e.into()).and_then(|cfg| gw_proxy::run_with(cfg, Registry::builtin(), opts));
    if let Err(e) = result {
        log::error!("gw-proxy failed to start: {e}");
        std::process::exit(1);
    }
}
