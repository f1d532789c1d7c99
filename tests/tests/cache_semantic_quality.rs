//! The semantic tier against the pairs in `tests/data/semantic_pairs.jsonl`: paraphrases (the
//! same question, which one answer serves) and unrelated-but-similar pairs (the same topic, a
//! different question). A pair hits when its cosine similarity reaches the threshold and the
//! verification (`gw_shared::cache::verify`) says it asks the same question, as in the proxy.
//! At the default threshold no unrelated pair may hit; precision and recall, with and without
//! the verification, are printed (`--nocapture`) for docs/cache.md.

use gw_shared::cache::embed::{cosine, LocalEmbedder};
use gw_shared::cache::settings::DEFAULT_THRESHOLD;
use gw_shared::cache::verify::{same_question, terms};
use gw_tests::{embedding_model_dir, workspace_root};
use serde::Deserialize;

#[derive(Deserialize)]
struct Pair {
    kind: String,
    a: String,
    b: String,
}

/// (the pair is a paraphrase, cosine similarity, the verification passes, the pair)
type Scored = (bool, f32, bool, Pair);

fn scored() -> Vec<Scored> {
    let text = std::fs::read_to_string(workspace_root().join("tests/data/semantic_pairs.jsonl")).unwrap();
    let embedder =
        LocalEmbedder::load(&embedding_model_dir()).expect("the local embedding model (scripts/services.sh start)");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let p: Pair = serde_json::from_str(l).unwrap();
            let s = cosine(&embedder.embed(&p.a).unwrap(), &embedder.embed(&p.b).unwrap());
            let verified = same_question(&terms(&p.a), &terms(&p.b));
            (p.kind == "paraphrase", s, verified, p)
        })
        .collect()
}

/// (precision, recall, false hits) of "similarity >= t (and, with `verify`, the same question)".
fn rates(scored: &[Scored], t: f32, verify: bool) -> (f64, f64, usize) {
    let hits: Vec<bool> =
        scored.iter().filter(|(_, s, v, _)| *s >= t && (*v || !verify)).map(|(same, ..)| *same).collect();
    let true_pos = hits.iter().filter(|h| **h).count();
    let false_pos = hits.len() - true_pos;
    let positives = scored.iter().filter(|(same, ..)| *same).count();
    let precision = if hits.is_empty() { 1.0 } else { true_pos as f64 / hits.len() as f64 };
    (precision, true_pos as f64 / positives as f64, false_pos)
}

#[test]
fn the_default_threshold_takes_no_unrelated_pair_for_a_paraphrase() {
    let scored = scored();
    let paraphrases = scored.iter().filter(|(same, ..)| *same).count();
    let unrelated = scored.len() - paraphrases;
    assert!(paraphrases >= 50 && unrelated >= 50, "{paraphrases} paraphrase and {unrelated} unrelated pairs");

    let max_unrelated = scored.iter().filter(|(same, ..)| !same).map(|(_, s, ..)| *s).fold(f32::MIN, f32::max);
    println!("pairs: {paraphrases} paraphrase, {unrelated} unrelated; highest unrelated similarity {max_unrelated:.4}");
    println!("           similarity only               similarity + verification");
    println!("threshold  precision  recall  false hits  precision  recall  false hits");
    for t in [0.60, 0.65, 0.70, 0.75, 0.80, 0.85, 0.90, 0.95] {
        let (p, r, fp) = rates(&scored, t, false);
        let (vp, vr, vfp) = rates(&scored, t, true);
        println!("{t:9.2}  {p:9.3}  {r:6.3}  {fp:10}  {vp:9.3}  {vr:6.3}  {vfp:10}");
    }
    let mut closest: Vec<&Scored> = scored.iter().filter(|(same, ..)| !same).collect();
    closest.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (_, s, _, p) in closest.iter().take(5) {
        println!("closest unrelated pair ({s:.4}): {:?} / {:?}", p.a, p.b);
    }
    for (same, s, _, p) in scored.iter().filter(|(same, _, v, _)| *same != *v) {
        let what = if *same { "paraphrase the verification refuses" } else { "unrelated pair it passes" };
        println!("{what} ({s:.4}): {:?} / {:?}", p.a, p.b);
    }

    let lowest_verified =
        scored.iter().filter(|(same, _, v, _)| *same && *v).map(|(_, s, ..)| *s).fold(f32::MAX, f32::min);
    println!("lowest similarity of a verified paraphrase: {lowest_verified:.4}");
    let (precision, recall, false_hits) = rates(&scored, DEFAULT_THRESHOLD, true);
    println!("at the default threshold {DEFAULT_THRESHOLD}: precision {precision:.3}, recall {recall:.3}");
    assert_eq!(false_hits, 0, "unrelated pairs at or above the default threshold");
    // A threshold no paraphrase reaches would be safe and useless.
    assert!(recall >= 0.15, "recall {recall:.3} at the default threshold");
}
