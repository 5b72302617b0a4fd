//! findAndModify: one document, chosen by query and sort, updated (or replaced,
//! or upserted) or removed, and returned as it was before or after.

use super::*;

#[derive(Debug, Clone, Default)]
pub struct FindAndModify {
    pub query: Document,
    pub sort: Option<Document>,
    pub remove: bool,
    pub update: Option<Bson>,
    pub new: bool,
    pub fields: Option<Document>,
    pub upsert: bool,
    pub array_filters: Option<Vec<Document>>,
    pub hint: Option<Bson>,
    pub let_vars: Option<Document>,
    pub bypass_document_validation: bool,
    /// The command's `collation` (None: the collection's default).
    pub collation: Option<Document>,
}

#[derive(Debug, Default)]
pub struct FamOutcome {
    pub value: Option<Document>,
    pub n: u64,
    pub updated_existing: bool,
    pub upserted: Option<Bson>,
    pub committed: Option<Committed>,
}

impl Engine {
    /// The findAndModify command: one document, chosen by query and sort, updated or removed.
    pub fn find_and_modify(&self, ns: &Namespace, req: &FindAndModify) -> Result<FamOutcome> {
        self.find_and_modify_recorded(ns, req, None)
    }

    /// [`Self::find_and_modify`], its commit recording its outcome for a retryable
    /// write (`retry`, one statement; see `write/retry.rs`).
    pub fn find_and_modify_recorded(
        &self,
        ns: &Namespace,
        req: &FindAndModify,
        retry: Option<&mut RetryWrite>,
    ) -> Result<FamOutcome> {
        if let Some(r) = &retry {
            r.check_statements(1)?;
        }
        let FamPlan {
            filter,
            vars,
            matcher,
            sort,
            projection,
            spec,
        } = FamPlan::parse(ns, req, self.collection(ns).as_deref())?;
        let mut out = FamOutcome::default();
        let mut txn = self.begin();
        check_writable(txn.catalog(), ns)?;
        let meta = match txn.catalog().get(ns) {
            Some(m) => m,
            None if req.upsert => self.ensure_collection(&mut txn, ns)?,
            None => return Ok(out),
        };
        let validator = DocumentValidator::for_write(&meta, req.bypass_document_validation)?;
        let plan = read::plan(&meta, &matcher, sort.as_ref(), req.hint.as_ref())?;
        let mut scan = Scan::new(plan.access);
        let target = if plan.sorted {
            let mut v = Vec::new();
            while v.is_empty() && !scan.done {
                scan.next_batch(&self.store, meta.id, &matcher, 1, &mut v)?;
            }
            v.pop()
        } else {
            let s = sort
                .as_ref()
                .expect("unsorted plans only when a sort is requested");
            // The first match in sort order (the first read among equals), holding one
            // match at a time instead of every match.
            let mut first: Option<(Vec<u8>, Document)> = None;
            scan.for_each_match(&self.store, meta.id, &matcher, |m| {
                let before = first
                    .as_ref()
                    .is_none_or(|f| s.compare(&m.1, &f.1) == std::cmp::Ordering::Less);
                if before {
                    first = Some(m);
                }
            })?;
            first
        };
        let project = |d: Document| -> Result<Document> {
            match &projection {
                Some(p) => p.apply(&d),
                None => Ok(d),
            }
        };
        match (target, spec) {
            (Some((id_ks, doc)), None) => {
                self.delete_in(&mut txn, &meta, &id_ks, &doc, None);
                out.n = 1;
                out.value = Some(project(doc)?);
            }
            (Some((id_ks, old)), Some(spec)) => {
                let mut pending = PendingIndex::default();
                let checked = validator.as_ref().filter(|v| v.checks_update_of(&old));
                let new = self.update_in(
                    &mut txn,
                    &meta,
                    &filter,
                    &spec,
                    id_ks,
                    old.clone(),
                    &mut pending,
                    &vars,
                )?;
                if let (Some(v), Some(new)) = (checked, &new) {
                    v.check_updated(new)?;
                }
                out.n = 1;
                out.updated_existing = true;
                out.value = Some(project(if req.new { new.unwrap_or(old) } else { old })?);
            }
            (None, Some(spec)) if req.upsert => {
                let (id, _, stored) =
                    self.upsert_in(&mut txn, &meta, &filter, &spec, &vars, validator.as_ref())?;
                out.n = 1;
                out.upserted = Some(id);
                if req.new {
                    let doc = Document::try_from(stored.as_ref())
                        .map_err(|e| Error::bad_value(e.to_string()))?;
                    out.value = Some(project(doc)?);
                }
            }
            _ => return Ok(out),
        }
        if let Some(r) = retry {
            let done = Done {
                stmts: vec![r.stmt(0)],
                n: out.n,
                fam: Some(out.record()),
                ..Done::default()
            };
            r.record(&mut txn, &done);
        }
        out.committed = Some(txn.commit()?);
        Ok(out)
    }
}

impl FamOutcome {
    /// The outcome as a retry record keeps it (`write/retry.rs`).
    fn record(&self) -> Document {
        let mut d = doc! {"n": self.n as i64, "e": self.updated_existing};
        if let Some(id) = &self.upserted {
            d.insert("u", id.clone());
        }
        if let Some(v) = &self.value {
            d.insert("v", v.clone());
        }
        d
    }

    /// The outcome a retry record kept (None if `record` is not one).
    pub fn from_record(record: &Document) -> Option<FamOutcome> {
        Some(FamOutcome {
            n: u64::try_from(record.get_i64("n").ok()?).ok()?,
            updated_existing: record.get_bool("e").ok()?,
            upserted: record.get("u").cloned(),
            value: record.get_document("v").ok().cloned(),
            committed: None,
        })
    }
}

/// A findAndModify request checked and parsed.
pub(crate) struct FamPlan {
    pub filter: Document,
    pub vars: Variables,
    pub matcher: Matcher,
    pub sort: Option<SortSpec>,
    pub projection: Option<tailstream_query::projection::Projection>,
    /// None: remove.
    pub spec: Option<UpdateSpec>,
}

impl FamPlan {
    /// `meta`: the collection, whose default collation applies without a `collation`.
    pub fn parse(ns: &Namespace, req: &FindAndModify, meta: Option<&CollMeta>) -> Result<FamPlan> {
        let (filter, mut vars) = crate::read::bind_let(&req.query, req.let_vars.as_ref())?;
        vars.collator = crate::read::find::operation_collator(meta, req.collation.as_ref())?;
        let matcher = Matcher::for_query_with_collation(&filter, vars.collator.clone())?;
        let sort = match &req.sort {
            Some(s) if !s.is_empty() => {
                Some(SortSpec::parse(s)?.with_collator(vars.collator.clone()))
            }
            _ => None,
        };
        let projection = match &req.fields {
            Some(f) if !f.is_empty() => {
                Some(tailstream_query::projection::Projection::with_collation(
                    f,
                    Some(&req.query),
                    vars.collator.clone(),
                )?)
            }
            _ => None,
        };
        let spec = match (&req.update, req.remove) {
            (Some(_), true) => {
                return Err(Error::failed_to_parse(
                    "Cannot specify both an update and remove=true",
                ))
            }
            (None, false) => {
                return Err(Error::failed_to_parse(
                    "Either an update or remove=true must be specified",
                ))
            }
            (Some(u), false) => Some(UpdateSpec::parse(u, req.array_filters.as_deref())?),
            (None, true) => None,
        };
        if req.remove && (req.upsert || req.new) {
            return Err(Error::failed_to_parse(
                "Cannot specify both upsert=true and remove=true",
            ));
        }
        if req.upsert || spec.is_some() {
            ns.validate_for_write()?;
        }
        Ok(FamPlan {
            filter,
            vars,
            matcher,
            sort,
            projection,
            spec,
        })
    }
}
