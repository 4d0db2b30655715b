//! The patterns checked against Lua's own: generated and hand-picked cases must give the same
//! results and errors; backtracking bombs must end at the budget; gsub's output is capped.

use std::sync::Arc;

use mlua::{Function, Lua, MultiValue, Table, Value};

use super::functions::install;
use super::matcher::Tick;
use std::time::{Duration, Instant};

/// Lua's own functions stay in `string`; ours go into the global `pat`.
fn state(tick: Tick) -> Lua {
    let lua = Lua::new();
    let pat = lua.create_table().unwrap();
    install(&lua, &pat, tick, 1 << 20).unwrap();
    lua.globals().set("pat", pat).unwrap();
    lua
}

fn never_spent() -> Tick {
    Arc::new(|| Ok(()))
}

/// Runs `call(lib, ...)` with `string` and with `pat`; describes any difference.
const COMPARE: &str = r#"
    local function norm(lib, name, ...)
      local args = table.pack(...)
      return table.pack(pcall(function()
        if name == "gmatch" then
          local out, n = {}, 0
          for a, b, c in lib.gmatch(table.unpack(args, 1, args.n)) do
            n = n + 1
            out[#out + 1] = tostring(a) .. "|" .. tostring(b) .. "|" .. tostring(c)
            if n > 40 then break end
          end
          return table.concat(out, ",")
        end
        return lib[name](table.unpack(args, 1, args.n))
      end))
    end
    return function(name, ...)
      local a, b = norm(string, name, ...), norm(pat, name, ...)
      if a[1] ~= b[1] then
        return "lua ok=" .. tostring(a[1]) .. " (" .. tostring(a[2]) .. "), ours ok="
          .. tostring(b[1]) .. " (" .. tostring(b[2]) .. ")"
      end
      if not a[1] then return nil end -- both failed
      if a.n ~= b.n then return "lua gave " .. a.n .. " values, ours " .. b.n end
      for i = 2, a.n do
        if a[i] ~= b[i] or math.type(a[i]) ~= math.type(b[i]) then
          return "value " .. (i - 1) .. ": lua " .. tostring(a[i]) .. ", ours " .. tostring(b[i])
        end
      end
      return nil
    end
"#;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic, so a failure is reproducible.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

const ATOMS: &[&str] = &[
    "a", "b", "c", ".", "%a", "%d", "%s", "%w", "%W", "%p", "%l", "%u", "%x", "%c", "%g", "%S",
    "%Z", "%.", "%%", "[ab]", "[^a]", "[a-c]", "[%d_]", "[]]", "[^]a]", "[a-]", "[%a%-]", "1", " ",
    "(", ")", "()", "%1", "%2", "%0", "%bab", "%b()", "%f[%w]", "%f[^a]", "%f[%s]", "$", "^", "*",
    "+", "-", "?", "[", "%", "%b", "%f", "%fa", "[a", "%z", "x",
];
const QUANTS: &[&str] = &["", "", "", "*", "+", "-", "?"];
const SUBJECT: &[u8] = b"aabbc1 ()_.A-\0";

fn pattern(rng: &mut Rng) -> String {
    let mut p = String::new();
    if rng.below(5) == 0 {
        p.push('^');
    }
    for _ in 0..rng.below(6) {
        let atom = rng.pick(ATOMS);
        p.push_str(atom);
        if atom.len() <= 4 && !matches!(atom, "(" | ")" | "()") {
            p.push_str(rng.pick(QUANTS));
        }
    }
    if rng.below(5) == 0 {
        p.push('$');
    }
    p
}

fn subject(rng: &mut Rng) -> String {
    (0..rng.below(14))
        .map(|_| SUBJECT[rng.below(SUBJECT.len())] as char)
        .collect()
}

#[test]
fn agrees_with_lua_on_generated_cases() {
    let lua = state(never_spent());
    let compare: Function = lua.load(COMPARE).eval().unwrap();
    let repl_fn: Function = lua
        .load(
            r#"return function(a, b) if a == "b" then return nil end
               if a == "c" then return false end
               if a == "1" then return 7 end
               return "<" .. tostring(a) .. ":" .. tostring(b) .. ">" end"#,
        )
        .eval()
        .unwrap();
    let repl_tab: Table = lua
        .load(r#"return { a = "A", b = false, ab = "%1", [1] = 1.5, ["1"] = 2 }"#)
        .eval()
        .unwrap();
    let repl_strs = ["x", "[%0]", "%1-%1", "%2", "%%", "%", "%a", "", "(%1)"];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut failures = Vec::new();
    let mut cases = 0;
    for _ in 0..4000 {
        let p = pattern(&mut rng);
        let s = subject(&mut rng);
        let init: Value = match rng.below(6) {
            0 => Value::Nil,
            1 => Value::Integer(-(rng.below(5) as i64)),
            _ => Value::Integer(rng.below(s.len() + 3) as i64),
        };
        let s_v = Value::String(lua.create_string(&s).unwrap());
        let p_v = Value::String(lua.create_string(&p).unwrap());
        let mut run = |name: &str, extra: Vec<Value>| {
            let mut args = MultiValue::new();
            args.push_back(Value::String(lua.create_string(name).unwrap()));
            args.push_back(s_v.clone());
            args.push_back(p_v.clone());
            args.extend(extra.clone());
            cases += 1;
            if let Some(diff) = compare.call::<Option<String>>(args).unwrap() {
                failures.push(format!("{name}({s:?}, {p:?}, {extra:?}): {diff}"));
            }
        };
        run("find", vec![init.clone()]);
        run("find", vec![init.clone(), Value::Boolean(true)]);
        run("match", vec![init.clone()]);
        run("gmatch", vec![init.clone()]);
        let n = match rng.below(3) {
            0 => Value::Nil,
            _ => Value::Integer(rng.below(4) as i64 - 1),
        };
        let r = repl_strs[rng.below(repl_strs.len())];
        run(
            "gsub",
            vec![Value::String(lua.create_string(r).unwrap()), n.clone()],
        );
        run("gsub", vec![Value::Function(repl_fn.clone()), n.clone()]);
        run("gsub", vec![Value::Table(repl_tab.clone()), n]);
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} differ:\n{}",
        failures.len(),
        failures[..failures.len().min(40)].join("\n")
    );
}

#[test]
fn hand_picked_cases_agree_with_lua() {
    let lua = state(never_spent());
    let compare: Function = lua.load(COMPARE).eval().unwrap();
    let cases: &[(&str, &str, &str)] = &[
        ("find", "hello world", "o w"),
        ("find", "hello", "l+"),
        ("find", "a.b", "."),
        ("match", "key = value", "(%w+)%s*=%s*(%w+)"),
        ("match", "  x", "()x()"),
        ("match", "THE (quick) fox", "%((%a+)%)"),
        ("match", "f(a(b)c)d", "%b()"),
        ("match", "THE (quick) fox", "%f[%a]%a+"),
        ("match", "hello", "(h)(e)(l)(l)(o)"),
        ("match", "abcabc", "(abc)%1"),
        ("match", "[[x]]", "%[(=*)%[(.-)%]%1%]"),
        ("gsub", "hello world", "(%w+)"),
        ("gsub", "abc", ""),
        ("gsub", "abc", "%w*"),
        ("gmatch", "one two  three", "%a+"),
        ("gmatch", "abc", ""),
        ("gmatch", "^a^a", "^a"),
        ("find", "a\0b", "%z"),
        ("find", "a\0b", "\0"),
        ("match", "a\0b", "[\0]"),
        ("match", "x", "(()"),
        ("match", "x", "%f"),
        ("match", "x", "[a-"),
        ("find", "b", "a%"),
        ("match", "a", "a%"),
    ];
    for (name, s, p) in cases {
        let d: Option<String> = if *name == "gsub" {
            compare.call((*name, *s, *p, "<%0>")).unwrap()
        } else {
            compare.call((*name, *s, *p)).unwrap()
        };
        assert!(d.is_none(), "{name}({s:?}, {p:?}): {d:?}");
    }
    // Deep nesting: Lua's limit, not a stack overflow.
    let deep = "(".repeat(250) + "a" + &")".repeat(250);
    let d: Option<String> = compare.call(("match", "a", deep)).unwrap();
    assert!(d.is_none(), "{d:?}");
    let many = "a?".repeat(300);
    let d: Option<String> = compare
        .call(("match", "a".repeat(300), many.clone()))
        .unwrap();
    assert!(d.is_none(), "{d:?}");
    let r: mlua::Result<Value> = lua
        .load(format!("return pat.match(string.rep('a', 300), '{many}')"))
        .eval();
    assert!(r.unwrap_err().to_string().contains("pattern too complex"));
    let r: mlua::Result<Value> = lua.load("return pat.find('a', 'a%')").eval();
    assert!(
        r.unwrap_err()
            .to_string()
            .contains("malformed pattern (ends with '%')")
    );
    let r: mlua::Result<Value> = lua.load("return pat.find('a', '(a)%2')").eval();
    assert!(
        r.unwrap_err()
            .to_string()
            .contains("invalid capture index %2")
    );
    let r: mlua::Result<Value> = lua.load("return pat.find('a', '%fa')").eval();
    assert!(
        r.unwrap_err()
            .to_string()
            .contains("missing '[' after '%f' in pattern")
    );
}

/// A tick that fails after `ms` milliseconds, as the sandbox's deadline does.
fn deadline(ms: u64) -> Tick {
    let until = Instant::now() + Duration::from_millis(ms);
    Arc::new(move || {
        if Instant::now() > until {
            Err("plugin call exceeded its deadline".into())
        } else {
            Ok(())
        }
    })
}

#[test]
fn backtracking_bombs_end_at_the_budget() {
    for code in [
        "return pat.find(string.rep('a', 100000), '.-.-.-.-b')",
        "return pat.gsub(string.rep('a', 50000), '.-.-.-b', 'x')",
        "for w in pat.gmatch(string.rep('a', 50000), 'a*a*a*b') do end",
    ] {
        let lua = state(deadline(200));
        let started = Instant::now();
        let e = lua.load(code).exec().unwrap_err().to_string();
        assert!(e.contains("exceeded its deadline"), "{code}: {e}");
        assert!(started.elapsed() < Duration::from_secs(2), "{code}");
    }
    // A plain search of a long needle is linear.
    let lua = state(deadline(2000));
    let i: Option<i64> = lua
        .load("return pat.find(string.rep('a', 1e6), string.rep('a', 1e4) .. 'b', 1, true)")
        .eval()
        .unwrap();
    assert_eq!(i, None);
}

#[test]
fn what_gsub_builds_is_capped() {
    let lua = Lua::new();
    let pat = lua.create_table().unwrap();
    install(&lua, &pat, never_spent(), 1000).unwrap();
    lua.globals().set("pat", pat).unwrap();
    let e = lua
        .load("return pat.gsub(string.rep('a', 100), 'a', string.rep('b', 20))")
        .exec()
        .unwrap_err()
        .to_string();
    assert!(e.contains("memory limit"), "{e}");
}
