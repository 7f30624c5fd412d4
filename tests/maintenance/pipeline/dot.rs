//! The dot output, checked by a small parser of the subset `to_dot` writes.

/// A token of the dot subset.
#[derive(Debug, PartialEq)]
enum T {
    Id(String),
    Sym(&'static str),
}

/// A small checker for the dot subset `to_dot` writes: `digraph ID { stmt* }` with attribute
/// statements, node statements and edge statements, each with optional `[k=v, ...]` and `;`.
/// The number of nodes and edges.
pub(super) fn check_dot(text: &str) -> Result<(usize, usize), String> {
    let toks = tokens(text)?;
    let mut i = 0;
    let id = |i: &mut usize| match toks.get(*i) {
        Some(T::Id(s)) => {
            *i += 1;
            Ok(s.clone())
        }
        t => Err(format!("expected an id at token {}, found {t:?}", *i)),
    };
    let sym = |i: &mut usize, s: &str| match toks.get(*i) {
        Some(T::Sym(x)) if *x == s => {
            *i += 1;
            true
        }
        _ => false,
    };
    if id(&mut i)? != "digraph" {
        return Err("must start with digraph".into());
    }
    if matches!(toks.get(i), Some(T::Id(_))) {
        i += 1;
    }
    if !sym(&mut i, "{") {
        return Err("expected {".into());
    }
    let (mut nodes, mut edges) = (0, 0);
    let mut declared = std::collections::HashSet::new();
    loop {
        if sym(&mut i, "}") {
            break;
        }
        let first = id(&mut i)?;
        if sym(&mut i, "=") {
            id(&mut i)?;
        } else {
            if sym(&mut i, "->") {
                let to = id(&mut i)?;
                for n in [&first, &to] {
                    if !declared.contains(n) {
                        return Err(format!("edge to undeclared node {n}"));
                    }
                }
                edges += 1;
            } else if !["node", "edge", "graph"].contains(&first.as_str()) {
                declared.insert(first.clone());
                nodes += 1;
            }
            if sym(&mut i, "[") {
                loop {
                    id(&mut i)?;
                    if !sym(&mut i, "=") {
                        return Err("expected = in attribute list".into());
                    }
                    id(&mut i)?;
                    if sym(&mut i, "]") {
                        break;
                    }
                    if !sym(&mut i, ",") && !matches!(toks.get(i), Some(T::Id(_))) {
                        return Err("expected , or ] in attribute list".into());
                    }
                }
            }
        }
        if !sym(&mut i, ";") {
            return Err(format!("expected ; at token {i}"));
        }
    }
    if i != toks.len() {
        return Err("trailing tokens after }".into());
    }
    Ok((nodes, edges))
}

/// The dot text's tokens: quoted or bare ids and the punctuation the subset uses.
fn tokens(text: &str) -> Result<Vec<T>, String> {
    let mut toks = Vec::new();
    let mut it = text.chars().peekable();
    while let Some(&c) = it.peek() {
        if c.is_whitespace() {
            it.next();
        } else if c == '"' {
            it.next();
            let mut s = String::new();
            loop {
                match it.next() {
                    None => return Err("unterminated string".into()),
                    Some('\\') => {
                        s.push('\\');
                        s.push(it.next().ok_or("dangling escape")?);
                    }
                    Some('"') => break,
                    Some(ch) => s.push(ch),
                }
            }
            toks.push(T::Id(s));
        } else if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
            let mut s = String::new();
            while let Some(&ch) = it.peek() {
                if ch.is_ascii_alphanumeric() || ch == '_' || ch == '.' {
                    s.push(ch);
                    it.next();
                } else {
                    break;
                }
            }
            toks.push(T::Id(s));
        } else {
            it.next();
            let sym = match c {
                '{' => "{",
                '}' => "}",
                '[' => "[",
                ']' => "]",
                ';' => ";",
                ',' => ",",
                '=' => "=",
                '-' if it.next_if_eq(&'>').is_some() => "->",
                _ => return Err(format!("unexpected character {c:?}")),
            };
            toks.push(T::Sym(sym));
        }
    }
    Ok(toks)
}

#[test]
fn dot_checker_rejects_broken_graphs() {
    assert!(check_dot("digraph g { \"a\"; \"b\"; \"a\" -> \"b\"; }").is_ok());
    for bad in [
        "graph g { }",
        "digraph g { \"a\" -> \"b\"; }",
        "digraph g { \"a\" [label=\"x\" ; }",
        "digraph g { \"a\"; ",
        "digraph g { \"a\" }",
        "digraph g { \"a\"; } }",
    ] {
        assert!(check_dot(bad).is_err(), "{bad}");
    }
}
