//! The walk of a parsed line down to each simple command: lists, pipelines, compound commands,
//! redirections and `[[ … ]]`, then each simple command recorded with its wrappers and, in turn,
//! what it runs (a shell's `-c` string, `eval`'s words, `find -exec`'s command). Apart from the
//! words (`words`) and the wrappers (`wrappers`) so that the shape of the tree is read alone.

use brush_parser::ast;

use super::bounds::{MAX_DEPTH, MAX_LEN, MAX_WORK, nesting};
use super::outcome::{Invocation, ShellError};
use super::parser::parse;
use super::wrappers::{SHELLS, ShellCode, program_name, shell_code, unwrap};

/// Every simple command the line runs, in order.
pub fn invocations(line: &str) -> Result<Vec<Invocation>, ShellError> {
    let mut walker = Walker::default();
    walker.line(line, 0)?;
    Ok(walker.out)
}

#[derive(Default)]
pub(super) struct Walker {
    out: Vec<Invocation>,
    /// Bytes parsed so far, nested strings included.
    work: usize,
}

impl Walker {
    /// Parses `text` (a line, or a string nested `depth` levels in one) and walks it.
    pub(super) fn line(&mut self, text: &str, depth: usize) -> Result<(), ShellError> {
        if text.len() > MAX_LEN {
            return Err(ShellError::TooLong);
        }
        self.spend(text.len())?;
        if depth + nesting(text) > MAX_DEPTH {
            return Err(ShellError::TooDeep);
        }
        for list in &parse(text)?.complete_commands {
            self.list(list, depth)?;
        }
        Ok(())
    }

    pub(super) fn spend(&mut self, bytes: usize) -> Result<(), ShellError> {
        self.work += bytes;
        if self.work > MAX_WORK {
            return Err(ShellError::TooMuch);
        }
        Ok(())
    }

    fn list(&mut self, list: &ast::CompoundList, depth: usize) -> Result<(), ShellError> {
        for ast::CompoundListItem(and_or, _) in &list.0 {
            self.pipeline(&and_or.first, depth)?;
            for next in &and_or.additional {
                let (ast::AndOr::And(p) | ast::AndOr::Or(p)) = next;
                self.pipeline(p, depth)?;
            }
        }
        Ok(())
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline, depth: usize) -> Result<(), ShellError> {
        for (i, command) in pipeline.seq.iter().enumerate() {
            self.command(command, i > 0, depth)?;
        }
        Ok(())
    }

    /// `piped`: its standard input is the output of the command before it.
    fn command(&mut self, c: &ast::Command, piped: bool, depth: usize) -> Result<(), ShellError> {
        match c {
            ast::Command::Simple(s) => self.simple(s, piped, depth),
            ast::Command::Compound(compound, redirects) => {
                self.compound(compound, depth)?;
                self.redirects(redirects.as_ref(), depth)
            }
            ast::Command::Function(f) => {
                // Defined here, perhaps run here: its body counts as run.
                self.compound(&f.body.0, depth)?;
                self.redirects(f.body.1.as_ref(), depth)
            }
            ast::Command::ExtendedTest(t) => self.test(&t.expr, depth),
        }
    }

    fn compound(&mut self, c: &ast::CompoundCommand, depth: usize) -> Result<(), ShellError> {
        use ast::CompoundCommand as C;
        match c {
            C::Arithmetic(a) => self.code_in(&a.expr.value, depth),
            C::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.code_in(&e.value, depth)?;
                }
                self.list(&f.body.list, depth)
            }
            C::BraceGroup(b) => self.list(&b.list, depth),
            C::Subshell(s) => self.list(&s.list, depth),
            C::ForClause(f) => {
                for w in f.values.iter().flatten() {
                    self.word(&w.value, depth)?;
                }
                self.list(&f.body.list, depth)
            }
            C::CaseClause(c) => {
                self.word(&c.value.value, depth)?;
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value, depth)?;
                    }
                    if let Some(list) = &item.cmd {
                        self.list(list, depth)?;
                    }
                }
                Ok(())
            }
            C::IfClause(i) => {
                self.list(&i.condition, depth)?;
                self.list(&i.then, depth)?;
                for e in i.elses.iter().flatten() {
                    if let Some(cond) = &e.condition {
                        self.list(cond, depth)?;
                    }
                    self.list(&e.body, depth)?;
                }
                Ok(())
            }
            C::WhileClause(w) | C::UntilClause(w) => {
                self.list(&w.0, depth)?;
                self.list(&w.1.list, depth)
            }
        }
    }

    /// `[[ … ]]`: only its words can run anything. Walked with a stack of its own: a long
    /// `a && b && …` chain is as deep as it is long.
    fn test(&mut self, expr: &ast::ExtendedTestExpr, depth: usize) -> Result<(), ShellError> {
        use ast::ExtendedTestExpr as E;
        let mut todo = vec![expr];
        while let Some(e) = todo.pop() {
            match e {
                E::And(a, b) | E::Or(a, b) => todo.extend([a.as_ref(), b.as_ref()]),
                E::Not(a) | E::Parenthesized(a) => todo.push(a),
                E::UnaryTest(_, w) => {
                    self.word(&w.value, depth)?;
                }
                E::BinaryTest(_, a, b) => {
                    self.word(&a.value, depth)?;
                    self.word(&b.value, depth)?;
                }
            }
        }
        Ok(())
    }

    fn redirects(
        &mut self,
        list: Option<&ast::RedirectList>,
        depth: usize,
    ) -> Result<(), ShellError> {
        for r in list.iter().flat_map(|l| &l.0) {
            self.redirect(r, depth)?;
        }
        Ok(())
    }

    fn redirect(&mut self, r: &ast::IoRedirect, depth: usize) -> Result<(), ShellError> {
        use ast::{IoFileRedirectTarget as T, IoRedirect as R};
        match r {
            R::File(_, _, T::Filename(w) | T::Duplicate(w)) => self.word(&w.value, depth).map(drop),
            R::File(_, _, T::ProcessSubstitution(_, sub)) => self.list(&sub.list, depth),
            R::File(_, _, T::Fd(_)) => Ok(()),
            R::HereDocument(_, doc) if doc.requires_expansion => {
                self.word(&doc.doc.value, depth).map(drop)
            }
            R::HereDocument(..) => Ok(()),
            R::HereString(_, w) | R::OutputAndError(w, _) => self.word(&w.value, depth).map(drop),
        }
    }

    fn simple(
        &mut self,
        s: &ast::SimpleCommand,
        piped: bool,
        depth: usize,
    ) -> Result<(), ShellError> {
        use ast::CommandPrefixOrSuffixItem as Item;
        let mut words = Vec::new();
        let mut stdin = piped;
        let prefix = s.prefix.iter().flat_map(|p| &p.0);
        let suffix = s.suffix.iter().flat_map(|p| &p.0);
        let name = s.word_or_name.iter().map(|w| (None, Some(w)));
        let items = prefix
            .map(|i| (Some(i), None))
            .chain(name)
            .chain(suffix.map(|i| (Some(i), None)));
        for (item, name) in items {
            match (item, name) {
                (_, Some(w)) | (Some(Item::Word(w)), _) => words.push(self.word(&w.value, depth)?),
                (Some(Item::AssignmentWord(a, _)), _) => match &a.value {
                    ast::AssignmentValue::Scalar(w) => drop(self.word(&w.value, depth)?),
                    ast::AssignmentValue::Array(items) => {
                        for (k, v) in items {
                            if let Some(k) = k {
                                self.word(&k.value, depth)?;
                            }
                            self.word(&v.value, depth)?;
                        }
                    }
                },
                (Some(Item::IoRedirect(r)), _) => {
                    stdin |= matches!(
                        r,
                        ast::IoRedirect::File(_, ast::IoFileRedirectKind::Read, _)
                            | ast::IoRedirect::HereDocument(..)
                            | ast::IoRedirect::HereString(..)
                    );
                    self.redirect(r, depth)?;
                }
                (Some(Item::ProcessSubstitution(_, sub)), _) => {
                    self.list(&sub.list, depth)?;
                    words.push("<(…)".to_string());
                }
                (None, None) => {}
            }
        }
        self.invocation(words, stdin, depth)
    }

    /// Records one simple command, then what it runs in turn: a shell's `-c` string, `eval`'s
    /// words, `find -exec`'s command.
    fn invocation(
        &mut self,
        mut words: Vec<String>,
        stdin: bool,
        depth: usize,
    ) -> Result<(), ShellError> {
        let Some(first) = words.first_mut() else {
            return Ok(());
        };
        *first = program_name(first);
        let invocation = Invocation {
            views: unwrap(words),
        };
        let inner = invocation.innermost().to_vec();
        self.out.push(invocation);
        let Some(program) = inner.first() else {
            return Ok(());
        };
        if depth >= MAX_DEPTH {
            return Err(ShellError::TooDeep);
        }
        if SHELLS.contains(&program.as_str()) {
            match shell_code(&inner) {
                ShellCode::Code(code) => self.line(code, depth + 1)?,
                ShellCode::Stdin if stdin => return Err(ShellError::Hidden(program.clone())),
                ShellCode::Stdin | ShellCode::Script => {}
            }
        } else if program == "eval" && inner.len() > 1 {
            self.line(&inner[1..].join(" "), depth + 1)?;
        } else if program == "find" {
            let mut rest = inner.iter();
            while rest.any(|w| matches!(w.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir")) {
                let run: Vec<String> = rest
                    .by_ref()
                    .take_while(|w| !matches!(w.as_str(), ";" | "+"))
                    .cloned()
                    .collect();
                self.invocation(run, false, depth + 1)?;
            }
        }
        Ok(())
    }
}
