//! Document validation: a collection's `validator` (a query filter, set by `create` or
//! `collMod`) checked against every document an insert, update or findAndModify writes,
//! with mongod's `validationLevel` (`strict`, `moderate`: updates of documents that
//! were already invalid are not checked, `off`) and `validationAction` (`error`, or
//! `warn`: log and write anyway), unless the command sets `bypassDocumentValidation`.

use crate::catalog::CollMeta;
use bson::{doc, Bson, Document};
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::matcher::Matcher;
use tailstream_query::validation_error;

pub(crate) struct DocumentValidator {
    matcher: Matcher,
    /// `validationLevel: moderate`.
    moderate: bool,
    /// `validationAction: warn`.
    warn_only: bool,
    ns: String,
}

impl DocumentValidator {
    /// The validator a write to `meta` must pass, or None when there is none to apply.
    pub(crate) fn for_write(meta: &CollMeta, bypass: bool) -> Result<Option<DocumentValidator>> {
        let validator = match meta.options.get("validator") {
            Some(Bson::Document(v)) if !v.is_empty() => v,
            _ => return Ok(None),
        };
        let level = meta.options.get_str("validationLevel").unwrap_or("strict");
        if bypass || level == "off" {
            return Ok(None);
        }
        Ok(Some(DocumentValidator {
            // As mongod: the validator compares strings under the collection's collation.
            matcher: Matcher::with_collation(validator, meta.default_collator()?)?,
            moderate: level == "moderate",
            warn_only: meta.options.get_str("validationAction") == Ok("warn"),
            ns: meta.ns.full(),
        }))
    }

    /// Checks a document an insert or upsert creates.
    pub(crate) fn check_new(&self, doc: &Document) -> Result<()> {
        self.check(doc)
    }

    /// Whether an update of `old` must be checked (moderate: only if `old` was valid).
    pub(crate) fn checks_update_of(&self, old: &Document) -> bool {
        !self.moderate || self.matcher.matches(old)
    }

    /// Checks the document an update produced.
    pub(crate) fn check_updated(&self, new: &Document) -> Result<()> {
        self.check(new)
    }

    fn check(&self, doc: &Document) -> Result<()> {
        if self.matcher.matches(doc) {
            return Ok(());
        }
        let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
        if self.warn_only {
            tracing::warn!(
                ns = %self.ns,
                id = %id,
                "Document would fail validation (validationAction: warn)"
            );
            return Ok(());
        }
        // As mongod 5.0+: why it failed, clause by clause (drivers' tests read it).
        let err_info = validation_error::err_info(
            self.matcher.filter(),
            doc,
            self.matcher.collator_arc().cloned(),
        );
        Err(Error::new(
            codes::DOCUMENT_VALIDATION_FAILURE,
            "Document failed validation",
        )
        .with_info(doc! {"errInfo": err_info}))
    }
}

/// Checks the validation options of a `create` or `collMod` command (`command` names it
/// in error messages): the validator must be a filter this server can evaluate.
pub(crate) fn check_options(command: &str, options: &Document) -> Result<()> {
    match options.get("validator") {
        None => {}
        Some(Bson::Document(v)) => {
            // mongod refuses JavaScript in validators ($where is refused by the parser).
            if tailstream_query::expr::contains_operator(&Bson::Document(v.clone()), &["$function"])
            {
                return Err(Error::location(
                    4660800,
                    "$function cannot be used inside a validator.",
                ));
            }
            Matcher::new(v)?;
        }
        Some(other) => {
            return Err(tailstream_query::args::wrong_type(
                &format!("{command}.validator"),
                other,
                "object",
            ))
        }
    }
    for (field, allowed) in [
        ("validationLevel", &["off", "strict", "moderate"][..]),
        ("validationAction", &["error", "warn"][..]),
    ] {
        match options.get(field) {
            None => {}
            Some(Bson::String(s)) if allowed.contains(&s.as_str()) => {}
            Some(Bson::String(s)) => {
                return Err(Error::bad_value(format!(
                    "Enumeration value '{s}' for field '{command}.{field}' is not a valid value."
                )))
            }
            Some(other) => {
                return Err(tailstream_query::args::wrong_type(
                    &format!("{command}.{field}"),
                    other,
                    "string",
                ))
            }
        }
    }
    Ok(())
}
