//! Model access: a key's and its team's model allow-lists, enforced on every endpoint (a model
//! a caller may not use looks exactly like one that does not exist) and applied to `/v1/models`.

use gw_shared::routing::ModelRoute;

/// Whether a caller holding these allow-lists may use `route` (`None`: every model). An entry
/// naming the model or any of its aliases admits it.
pub fn allowed(key: Option<&[String]>, team: Option<&[String]>, route: &ModelRoute) -> bool {
    let admits = |list: Option<&[String]>| list.is_none_or(|l| l.iter().any(|m| route.is_named(m)));
    admits(key) && admits(team)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gw_shared::config::Config;
    use gw_shared::providers::Registry;
    use gw_shared::routing::Router;

    #[test]
    fn both_lists_must_admit_the_model_by_any_name() -> Result<(), Box<dyn std::error::Error>> {
        let cfg = Config::parse(
            r#"
[[providers]]
name = "mock"
kind = "mock"
[[models]]
name = "a"
aliases = ["alpha"]
deployments = [{ provider = "mock" }]
[pricing]
"a" = { input_per_mtok = "0", output_per_mtok = "0" }
"#,
            |_| None,
        )?;
        let router = Router::from_config(&cfg, &Registry::builtin())?;
        let a = router.resolve("a").ok_or("model a missing")?;
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(allowed(None, None, &a));
        assert!(allowed(Some(&list(&["alpha"])), None, &a));
        assert!(allowed(Some(&list(&["a", "b"])), Some(&list(&["a"])), &a));
        assert!(!allowed(Some(&list(&["b"])), None, &a));
        assert!(!allowed(None, Some(&list(&[])), &a));
        assert!(!allowed(Some(&list(&["a"])), Some(&list(&["b"])), &a));
        Ok(())
    }
}
