//! The one door to brush-parser: its options, and a parse that turns a panic of the parser (a
//! crate that is not ours) into a syntax error. Apart so that every call into the foreign crate
//! goes through the same guard.

use brush_parser::ast;

use super::outcome::ShellError;

pub(super) fn options() -> brush_parser::ParserOptions {
    brush_parser::ParserOptions::default()
}

pub(super) fn parse(text: &str) -> Result<ast::Program, ShellError> {
    let options = options();
    let run = || {
        let tokens = brush_parser::uncached_tokenize_str(text, &options.tokenizer_options())
            .map_err(|e| e.to_string())?;
        brush_parser::parse_tokens(&tokens, &options, &brush_parser::SourceInfo::default())
            .map_err(|e| e.to_string())
    };
    // The parser is not ours: should it panic, the line is unparseable, the daemon unharmed.
    std::panic::catch_unwind(run)
        .unwrap_or_else(|_| Err("the shell parser failed".to_string()))
        .map_err(ShellError::Syntax)
}
