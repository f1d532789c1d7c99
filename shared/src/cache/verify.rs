//! Whether a prompt the semantic tier found near asks the same question. Sentence embeddings
//! place "convert a string to an integer" and "convert an integer to a string" at a cosine of
//! 0.999, and "the capital of Austria" next to "the capital of Hungary": the vector finds
//! candidates, this check decides. Two prompts ask the same question when their content words
//! (lower-cased, stemmed, contractions opened, without articles, auxiliaries and the words that
//! only frame a request: "how do I", "can you tell me", "what's the way to") are the same set,
//! and, when either says which way something goes ("to", "from", "into", "than", "vs"), come in
//! the same order. Numbers, names, negations and every other word count, so a paraphrase that
//! swaps a word for a synonym is a miss: the semantic tier trades that recall for never
//! answering a different question.

use std::collections::HashSet;

use rust_stemmers::{Algorithm, Stemmer};

/// Words that frame a request or hold a sentence together without changing what is asked.
/// Negations, comparatives, ordinals, question words that change the answer (when, where, who,
/// why) and every preposition of direction are not here.
const FRAMING: &[&str] = &[
    "a",
    "an",
    "the",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "am",
    "do",
    "does",
    "did",
    "doing",
    "have",
    "has",
    "had",
    "i",
    "me",
    "my",
    "mine",
    "myself",
    "you",
    "your",
    "yours",
    "we",
    "our",
    "us",
    "it",
    "its",
    "this",
    "that",
    "these",
    "those",
    "there",
    "here",
    "what",
    "which",
    "how",
    "can",
    "could",
    "would",
    "should",
    "will",
    "shall",
    "may",
    "might",
    "please",
    "kindly",
    "tell",
    "show",
    "explain",
    "describe",
    "give",
    "provide",
    "help",
    "need",
    "want",
    "like",
    "know",
    "let",
    "way",
    "ways",
    "method",
    "go",
    "about",
    "some",
    "any",
    "just",
    "also",
    "quick",
    "quickly",
    "simple",
    "simply",
    "easy",
    "easily",
    "possible",
    "in",
    "on",
    "for",
    "with",
    "at",
    "by",
    "of",
    "and",
    "or",
    "to",
    "from",
    "into",
    "than",
    "vs",
    "versus",
    "so",
    "if",
    "write",
    "compose",
    "create",
    "generate",
    "make",
    "get",
    "find",
    "out",
    "correct",
    "proper",
    "properly",
    "right",
    "exactly",
    "actually",
    "someone",
    "anyone",
    "something",
    "anything",
    "thing",
    "things",
    "use",
    "using",
    "used",
    "mean",
    "means",
    "meaning",
    "command",
    "calculate",
    "compute",
    "determine",
    "many",
    "much",
];

/// Numbers written as words, written as digits.
const NUMBER_WORDS: &[(&str, &str)] = &[
    ("zero", "0"),
    ("one", "1"),
    ("two", "2"),
    ("three", "3"),
    ("four", "4"),
    ("five", "5"),
    ("six", "6"),
    ("seven", "7"),
    ("eight", "8"),
    ("nine", "9"),
    ("ten", "10"),
    ("twelve", "12"),
    ("twenty", "20"),
    ("hundred", "100"),
    ("percent", "%"),
];

/// Words that say which way something goes: with one in either prompt, word order matters.
const DIRECTIONAL: &[&str] = &["to", "from", "into", "than", "vs", "versus", "over", "per"];

/// A prompt's content words in order (stemmed), and whether it has a word of direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    words: Vec<String>,
    directional: bool,
}

fn open_contractions(text: &str) -> String {
    let lower = text.to_lowercase().replace(['\u{2019}', '`'], "'");
    lower
        .replace("can't", "can not")
        .replace("won't", "will not")
        .replace("n't", " not")
        .replace("'re", " are")
        .replace("'m", " am")
        .replace("'ll", " will")
        .replace("'ve", " have")
        .replace("'d", " would")
        .replace("'s", "")
}

pub fn terms(text: &str) -> Terms {
    let stemmer = Stemmer::create(Algorithm::English);
    // `20%` is `20 %`: the sign is a word of its own, as "percent" is.
    let opened = open_contractions(text).replace('%', " % ");
    // Letters, digits and the marks that make names of their own (C#, C++, .NET, 3.5, 20%).
    let tokens = opened
        .split(|c: char| !(c.is_alphanumeric() || matches!(c, '#' | '+' | '%' | '.' | '_')))
        .map(|t| t.trim_matches('.'))
        .filter(|t| !t.is_empty());
    let mut words = Vec::new();
    let mut directional = false;
    // "the way to", "how to", "want to": an infinitive's `to` says nothing of direction.
    let mut after_framing = true;
    for t in tokens {
        let t = NUMBER_WORDS.iter().find(|(w, _)| *w == t).map_or(t, |(_, n)| *n);
        directional |= DIRECTIONAL.contains(&t) && !after_framing;
        after_framing = FRAMING.contains(&t);
        if after_framing {
            continue;
        }
        words.push(stemmer.stem(t).into_owned());
    }
    Terms { words, directional }
}

/// Each word once, where it first appears.
fn first_occurrences(words: &[String]) -> Vec<&str> {
    let mut seen = HashSet::new();
    words.iter().map(String::as_str).filter(|w| seen.insert(*w)).collect()
}

/// Whether two prompts ask the same question (see the module's documentation).
pub fn same_question(a: &Terms, b: &Terms) -> bool {
    let set_a: HashSet<&str> = a.words.iter().map(String::as_str).collect();
    let set_b: HashSet<&str> = b.words.iter().map(String::as_str).collect();
    if set_a != set_b || set_a.is_empty() {
        return false;
    }
    if a.directional || b.directional {
        return first_occurrences(&a.words) == first_occurrences(&b.words);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &str, b: &str) -> bool {
        same_question(&terms(a), &terms(b))
    }

    #[test]
    fn rewordings_of_one_question_match() {
        assert!(same("How do I reverse a list in Python?", "What's the way to reverse a Python list?"));
        assert!(same("how to reverse a list in python", "How do I reverse a list in Python?"));
        assert!(same("Can you tell me the capital of France?", "What is the capital of France"));
        assert!(same("Write a haiku about autumn leaves", "Compose a haiku about autumn leaves."));
        assert!(same("What is 15% of 80?", "Calculate 15 percent of 80."));
        assert!(same("Give me 5 tips for better sleep", "give me five tips for better sleep"));
    }

    #[test]
    fn different_questions_do_not() {
        assert!(!same("Convert 10 miles to kilometers", "Convert 10 kilometers to miles"));
        assert!(!same("Find flights from London to Paris", "Find flights from Paris to London"));
        assert!(!same(
            "How do I convert a string to an integer in C#?",
            "How do I convert an integer to a string in C#?"
        ));
        assert!(!same("How do I declare an array in C#?", "How do I declare an array in C?"));
        assert!(!same("What is the capital of Austria?", "What is the capital of Hungary?"));
        assert!(!same("Who won the Super Bowl in 2020?", "Who won the Super Bowl in 2021?"));
        assert!(!same("Can dogs eat grapes?", "Can't dogs eat grapes?"));
        assert!(!same("When was Hamlet written?", "Where was Hamlet written?"));
        assert!(!same("What is the best time to visit Thailand?", "What is the worst time to visit Thailand?"));
        assert!(!same("How do I write to a file?", "How do I read from a file?"));
        assert!(!same("What is 20% of 150?", "What is 25% of 150?"));
        assert!(!same("Give me 5 tips for better sleep", "Give me 6 tips for better sleep"));
    }

    #[test]
    fn nothing_to_compare_is_no_match() {
        assert!(!same("", ""));
        assert!(!same("how do I", "what is the"));
    }
}
