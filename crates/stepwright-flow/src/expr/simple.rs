//! Comparisons simple enough to need no template engine — `new.category == old.category`,
//! `output.status != "failed"` — answered directly where the answer cannot differ from
//! minijinja's: both sides strings, both booleans or both none. Anything else (a field that
//! does not exist, numbers, lists, maps, mixed kinds) is left to minijinja, which gives its
//! own answer or error. An experiment scores every run of its population with such an
//! expression; building minijinja's state for each cost more than the rest of the scoring.

use serde_json::Value;

/// `left == right` or `left != right`.
#[derive(Debug)]
pub(super) struct Comparison {
    left: Operand,
    equal: bool,
    right: Operand,
}

#[derive(Debug)]
enum Operand {
    /// A name and the fields read below it: `new.category`.
    Path(Vec<Box<str>>),
    /// A string, `true`/`false` or `none` written out.
    Literal(Value),
}

#[derive(Debug, PartialEq)]
enum Token<'a> {
    Path(&'a str),
    Text(&'a str),
    Equal(bool),
}

/// The comparison `source` is, if it is one of the simple kind.
pub(super) fn parse(source: &str) -> Option<Comparison> {
    let tokens = tokens(source)?;
    let [left, Token::Equal(equal), right] = tokens.as_slice() else { return None };
    Some(Comparison { left: operand(left)?, equal: *equal, right: operand(right)? })
}

fn tokens(source: &str) -> Option<Vec<Token<'_>>> {
    let mut tokens = Vec::with_capacity(3);
    let mut rest = source;
    loop {
        rest = rest.trim_start();
        let Some(first) = rest.chars().next() else { return Some(tokens) };
        let taken = match first {
            '=' | '!' => {
                let equal = rest.starts_with("==");
                if !equal && !rest.starts_with("!=") {
                    return None;
                }
                tokens.push(Token::Equal(equal));
                2
            }
            // A string without escapes (what one means is minijinja's to say).
            '"' | '\'' => {
                let end = rest[1..].find(first)?;
                let text = &rest[1..=end];
                if text.contains('\\') {
                    return None;
                }
                tokens.push(Token::Text(text));
                end + 2
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let end =
                    rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).unwrap_or(rest.len());
                tokens.push(Token::Path(&rest[..end]));
                end
            }
            _ => return None,
        };
        rest = &rest[taken..];
    }
}

fn operand(token: &Token<'_>) -> Option<Operand> {
    match token {
        Token::Text(text) => Some(Operand::Literal(Value::String((*text).to_owned()))),
        Token::Path("true" | "True") => Some(Operand::Literal(Value::Bool(true))),
        Token::Path("false" | "False") => Some(Operand::Literal(Value::Bool(false))),
        Token::Path("none" | "None") => Some(Operand::Literal(Value::Null)),
        Token::Path(path) => {
            let fields: Vec<Box<str>> = path.split('.').map(Box::from).collect();
            let well_formed =
                fields.iter().all(|f| f.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_'));
            well_formed.then_some(Operand::Path(fields))
        }
        Token::Equal(_) => None,
    }
}

impl Comparison {
    /// Its answer over `names`, or `None` where minijinja must give it.
    pub(super) fn eval(&self, names: &[(&str, &Value)]) -> Option<bool> {
        let (left, right) = (self.left.resolve(names)?, self.right.resolve(names)?);
        let same = match (left, right) {
            (Value::String(a), Value::String(b)) => a == b,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Null, Value::Null) => true,
            _ => return None,
        };
        Some(same == self.equal)
    }
}

impl Operand {
    fn resolve<'v>(&'v self, names: &[(&str, &'v Value)]) -> Option<&'v Value> {
        match self {
            Self::Literal(value) => Some(value),
            Self::Path(fields) => {
                let (root, below) = fields.split_first()?;
                // As minijinja's context of them, the last of a name wins.
                let &(_, mut value) = names.iter().rev().find(|(name, _)| *name == &**root)?;
                for field in below {
                    value = value.as_object()?.get(&**field)?;
                }
                Some(value)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::parse;
    use crate::expr::{Expression, eval};

    /// Each expression over each set of names: the same value, or the same error, as
    /// minijinja's; and answered here (without minijinja) exactly where `direct` says.
    #[test]
    fn a_simple_comparison_answers_as_minijinja_does() {
        let old = json!({ "category": "bug", "ok": true, "n": 1, "gone": null, "deep": { "a": "x" }, "list": [1] });
        let new =
            json!({ "category": "billing", "ok": true, "n": 1.0, "gone": null, "deep": { "a": "x" }, "list": [1] });
        let input = json!("Classify: it crashes");
        let names: [(&str, &Value); 3] = [("old", &old), ("new", &new), ("input", &input)];
        let cases: &[(&str, bool)] = &[
            ("new.category == old.category", true),
            ("new.category != old.category", true),
            ("  old.category=='bug' ", true),
            (r#"old.category == "bug""#, true),
            ("new.ok == old.ok", true),
            ("new.ok != True", true),
            ("old.gone == none", true),
            ("None == new.gone", true),
            ("new.deep.a == old.deep.a", true),
            ("input == 'Classify: it crashes'", true),
            ("'a' == 'a'", true),
            // Left to minijinja: numbers (1 == 1.0), lists, maps, mixed kinds, missing fields.
            ("new.n == old.n", false),
            ("new.list == old.list", false),
            ("new.deep == old.deep", false),
            ("new.category == none", false),
            ("new.missing == old.missing", false),
            ("new.category.x == 'a'", false),
            ("other == 'a'", false),
            ("new.category == old.category and true", false),
            ("not new.ok == old.ok", false),
            ("new.category|upper == 'BILLING'", false),
            (r#"old.category == "b\"ug""#, false),
            ("old.category == 'bug' == true", false),
            ("range == 'x'", false),
            ("new.n > old.n", false),
        ];
        for (source, direct) in cases {
            let expression = Expression::parse(source).unwrap_or_else(|e| panic!("{source}: {e}"));
            let answered = expression.comparison.as_ref().and_then(|c| c.eval(&names));
            assert_eq!(answered.is_some(), *direct, "{source}: answered here: {answered:?}");
            let (ours, theirs) = (expression.eval_over(&names), eval(source, &names[..]));
            match (&ours, &theirs) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{source}"),
                (Err(a), Err(b)) => assert_eq!(a.message, b.message, "{source}"),
                _ => panic!("{source}: {ours:?} here, {theirs:?} from minijinja"),
            }
            if let Some(answer) = answered {
                assert_eq!(theirs.unwrap(), Value::Bool(answer), "{source}");
            }
        }
    }

    #[test]
    fn only_one_comparison_of_two_operands_is_simple() {
        for source in ["a == b == c", "a = b", "a === b", "a !== b", "a..b == c", "a. == b", "1 == a", "a == b)", "a"] {
            assert!(parse(source).is_none(), "{source}");
        }
        assert!(parse("a.b != _c.d_1").is_some());
    }
}
