use super::*;

const SAMPLE: &str = r#"
[[providers]]
name = "mock"
kind = "mock"

[[providers]]
name = "up"
kind = "openai"
base_url = "http://127.0.0.1:9999/v1"
api_key_env = "UP_KEY"

[[models]]
name = "m1"
deployments = [{ provider = "up", model = "real-m1" }, { provider = "mock" }]

[pricing]
"real-m1" = { input_per_mtok = "1.5", output_per_mtok = "2" }
"m1" = { input_per_mtok = "0", output_per_mtok = "0" }
"#;

fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
}

#[test]
fn parses_and_applies_env() {
    let cfg = Config::parse(SAMPLE, env(&[("UP_KEY", "sk-up"), ("GW_PROXY_LISTEN", "0.0.0.0:1")])).unwrap();
    assert_eq!(cfg.proxy.listen, "0.0.0.0:1");
    assert_eq!(cfg.providers[1].api_key.as_deref(), Some("sk-up"));
    assert_eq!(cfg.models[0].deployments.len(), 2);
}

#[test]
fn rejects_unpriced_model() {
    let text = SAMPLE.replace("\"real-m1\" = { input_per_mtok = \"1.5\", output_per_mtok = \"2\" }", "");
    let err = Config::parse(&text, env(&[])).unwrap_err();
    assert!(err.to_string().contains("no [pricing] entry"), "{err}");
}

#[test]
fn catalog_prices_known_models_and_pricing_overrides() {
    let text = SAMPLE.replace("model = \"real-m1\"", "model = \"gpt-4o-mini\"");
    let cfg = Config::parse(&text, env(&[])).unwrap();
    let p = cfg.price_of("openai", "gpt-4o-mini").unwrap();
    assert_eq!(p.input_per_mtok.to_string(), "0.15");
    let text = format!("{text}\n\"gpt-4o-mini\" = {{ input_per_mtok = \"9\", output_per_mtok = \"9\" }}\n");
    let cfg = Config::parse(&text, env(&[])).unwrap();
    assert_eq!(cfg.price_of("openai", "gpt-4o-mini").unwrap().input_per_mtok.to_string(), "9");
}

#[test]
fn routing_options_are_checked() {
    let bad = SAMPLE.replace("name = \"m1\"", "name = \"m1\"\nfallbacks = [\"nope\"]");
    assert!(Config::parse(&bad, env(&[])).unwrap_err().to_string().contains("unknown fallback"));
    let bad = SAMPLE.replace("name = \"m1\"", "name = \"m1\"\nfallbacks = [\"m1\"]");
    assert!(Config::parse(&bad, env(&[])).unwrap_err().to_string().contains("itself"));
    let bad = SAMPLE.replace("name = \"m1\"", "name = \"m1\"\naliases = [\"m1\"]");
    assert!(Config::parse(&bad, env(&[])).unwrap_err().to_string().contains("twice"));
    let bad = SAMPLE.replace("{ provider = \"mock\" }", "{ provider = \"mock\", weight = 0 }");
    assert!(Config::parse(&bad, env(&[])).unwrap_err().to_string().contains("weights"));
    let good = SAMPLE
        .replace(
            "{ provider = \"mock\" }",
            "{ provider = \"mock\", weight = 3, rpm = 10, tpm = 1000, region = \"eu\", timeout_ms = 5 }",
        )
        .replace("name = \"m1\"", "name = \"m1\"\nstrategy = \"least_inflight\"\nretries = 2");
    let cfg = Config::parse(&good, env(&[])).unwrap();
    assert_eq!(cfg.models[0].strategy, Strategy::LeastInflight);
    assert_eq!(cfg.models[0].deployments[1].timeouts.timeout_ms, Some(5));
}

#[test]
fn keyring_from_env() {
    let k1 = EncryptionKey::generate().to_base64();
    let k2 = EncryptionKey::generate().to_base64();
    let pairs: Vec<(String, String)> = vec![
        ("GW_ENCRYPTION_KEY".into(), k2),
        ("GW_ENCRYPTION_KEY_VERSION".into(), "2".into()),
        ("GW_ENCRYPTION_KEY_V1".into(), k1),
    ];
    let cfg = Config::parse(SAMPLE, |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())).unwrap();
    let ring = cfg.secrets.keyring.unwrap();
    assert_eq!(ring.current_version(), 2);
    assert!(ring.get(1).is_some() && ring.get(3).is_none());
}

#[test]
fn rejects_unknown_provider_and_bad_url() {
    let text = SAMPLE.replace("provider = \"up\"", "provider = \"nope\"");
    assert!(Config::parse(&text, env(&[])).is_err());
    let text = SAMPLE.replace("http://127.0.0.1:9999/v1", "ftp://x");
    assert!(Config::parse(&text, env(&[])).is_err());
}

#[test]
fn shipped_config_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf/gw.toml");
    Config::load_from(&path, |_| None).unwrap();
}

#[test]
fn billing_reads_its_secrets_and_air_gapped_mode_from_the_environment() {
    let text =
        format!("{SAMPLE}\n[billing]\napi_base = \"http://127.0.0.1:1\"\n[billing.prices]\ngrowth = \"price_g\"\n");
    let vars = env(&[
        ("STRIPE_SECRET_KEY", "sk_test_1"),
        ("STRIPE_WEBHOOK_SECRET", "whsec_a, whsec_b,"),
        ("AIRGAP_MODE", "true"),
    ]);
    let cfg = Config::parse(&text, vars).unwrap();
    assert_eq!(cfg.billing.secret_key.as_deref(), Some("sk_test_1"));
    assert_eq!(cfg.billing.webhook_secrets, vec!["whsec_a", "whsec_b"]);
    assert!(cfg.billing.airgap);
    assert_eq!(cfg.billing.plan_of_price("price_g"), Some("growth"));
    assert_eq!(cfg.billing.plan_of_price("price_x"), None);
    assert!(!format!("{:?}", cfg.billing).contains("sk_test_1"), "the key in a debug print");
    let off = Config::parse(&text, env(&[("AIRGAP_MODE", "false")])).unwrap();
    assert!(!off.billing.airgap && off.billing.webhook_secrets.is_empty());
    let err = Config::parse(&text, env(&[("AIRGAP_MODE", "yes")])).unwrap_err();
    assert!(err.to_string().contains("AIRGAP_MODE must be true or false"), "{err}");
}

#[test]
fn redis_takes_one_server_a_cluster_or_a_sentinel() {
    use super::Topology;
    let cfg = Config::parse(SAMPLE, env(&[("UP_KEY", "k"), ("REDIS_URL", "rediss://r:6380")])).unwrap();
    assert_eq!(cfg.redis.topology(), Topology::Standalone("rediss://r:6380".into()));
    assert_eq!(cfg.redis.cache_topology(), cfg.redis.topology());
    let cfg = Config::parse(SAMPLE, env(&[("UP_KEY", "k"), ("REDIS_CLUSTER", "redis://a:1, redis://b:2,")])).unwrap();
    assert_eq!(cfg.redis.topology(), Topology::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()]));
    let sentinel = format!(
        "{SAMPLE}\n[redis]\nurl = \"redis://:pw@ignored/2\"\nsentinel = {{ master = \"gw\", nodes = [\"redis://s:26379\"] }}\n"
    );
    let cfg = Config::parse(&sentinel, env(&[("UP_KEY", "k")])).unwrap();
    assert_eq!(
        cfg.redis.topology(),
        Topology::Sentinel {
            master: "gw".into(),
            sentinels: vec!["redis://s:26379".into()],
            url: "redis://:pw@ignored/2".into()
        }
    );
    let both = format!(
        "{SAMPLE}\n[redis]\ncluster = [\"redis://a:1\"]\nsentinel = {{ master = \"gw\", nodes = [\"redis://s:1\"] }}\n"
    );
    let err = Config::parse(&both, env(&[("UP_KEY", "k")])).unwrap_err().to_string();
    assert!(err.contains("cluster or sentinel, not both"), "{err}");
    let no_nodes = format!("{SAMPLE}\n[redis]\nsentinel = {{ master = \"gw\", nodes = [] }}\n");
    assert!(Config::parse(&no_nodes, env(&[("UP_KEY", "k")])).is_err());
    let cache = format!("{SAMPLE}\n[redis]\ncluster = [\"redis://a:1\"]\ncache_url = \"redis://c:1\"\n");
    let cfg = Config::parse(&cache, env(&[("UP_KEY", "k")])).unwrap();
    assert_eq!(cfg.redis.cache_topology(), Topology::Standalone("redis://c:1".into()));
}
