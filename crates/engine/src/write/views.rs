//! Views' DDL: `create`, `collMod` and `drop` of a view write its definition into
//! `<db>.system.views` through the ordinary write path, in one batch with the catalog
//! change (the definitions and their checks are in `catalog/views.rs`).

use crate::catalog::namespace::Namespace;
use crate::catalog::views::*;
use crate::catalog::{CollMeta, ViewMeta};
use crate::core::keys;
use crate::oplog::txn::{Committed, Txn};
use crate::write::{ComputedUpdate, PendingIndex};
use crate::Engine;
use bson::{Bson, Document, RawDocumentBuf};
use std::sync::Arc;
use tailstream_query::error::{codes, Error, Result};

impl Engine {
    /// The view `ns`, if it is one.
    pub fn view(&self, ns: &Namespace) -> Option<Arc<ViewMeta>> {
        self.catalog().view(ns)
    }

    /// `ns` resolved to the collection it reads, if it is a view.
    pub fn resolve_view(&self, ns: &Namespace) -> Result<Option<ResolvedView>> {
        self.catalog().resolve_view(ns)
    }

    /// `create` with `viewOn`: stores the view (an identical existing view is fine).
    pub(crate) fn create_view(&self, ns: &Namespace, options: &Document) -> Result<Committed> {
        ns.validate_for_write()?;
        let view = definition_from_create(ns, options)?;
        let mut txn = self.begin();
        if let Some(existing) = txn.catalog().view(ns) {
            if *existing == view {
                return txn.commit();
            }
            return Err(Error::new(
                codes::NAMESPACE_EXISTS,
                format!("A view already exists. NS: {}", ns.full()),
            ));
        }
        if let Some(existing) = txn.catalog().get(ns) {
            return Err(crate::write::ddl::namespace_exists(&existing));
        }
        check_graph(txn.catalog(), &view)?;
        let system_views = Namespace::new(&ns.db, SYSTEM_VIEWS);
        let sys = match txn.catalog().get(&system_views) {
            Some(m) => m,
            None => self.create_in(&mut txn, &system_views, Document::new())?,
        };
        let raw = RawDocumentBuf::from_document(&view.definition())
            .map_err(|e| Error::internal(e.to_string()))?;
        self.insert_in(&mut txn, &sys, raw, &mut PendingIndex::default())?;
        txn.catalog_mut().views.insert(ns.full(), Arc::new(view));
        txn.commit()
    }

    /// `collMod` of a view: a new `viewOn` and/or `pipeline` (the other half is kept).
    pub(crate) fn modify_view(
        &self,
        txn: &mut Txn<'_>,
        current: &ViewMeta,
        view_on: Option<&Bson>,
        pipeline: Option<&Bson>,
    ) -> Result<()> {
        let mut view = current.clone();
        if let Some(v) = view_on {
            view.view_on = parse_view_on("collMod", v)?;
        }
        if let Some(p) = pipeline {
            view.pipeline = parse_pipeline("collMod", p)?;
        }
        validate_pipeline(&view)?;
        check_graph(txn.catalog(), &view)?;
        let sys = self.system_views_of(txn, &view.ns)?;
        let id = Bson::String(view.ns.full());
        let id_ks = keys::id_key(&id);
        let old = current.definition();
        let new = view.definition();
        if old != new {
            // A replacement, as mongod logs it (its change stream builds the `modify`
            // event from the whole new definition).
            let change = ComputedUpdate {
                new,
                updated: Document::new(),
                removed: Vec::new(),
                replaced: true,
            };
            self.store_update(txn, &sys, &id_ks, old, change, &mut PendingIndex::default())?;
        }
        txn.catalog_mut()
            .views
            .insert(view.ns.full(), Arc::new(view));
        Ok(())
    }

    /// Drops a view: its definition leaves `system.views` (a delete in the oplog).
    pub(crate) fn drop_view_in(&self, txn: &mut Txn<'_>, view: &ViewMeta) -> Result<()> {
        let sys = self.system_views_of(txn, &view.ns)?;
        let id_ks = keys::id_key(&Bson::String(view.ns.full()));
        self.delete_in(txn, &sys, &id_ks, &view.definition(), None);
        txn.catalog_mut().views.remove(&view.ns.full());
        Ok(())
    }

    fn system_views_of(&self, txn: &Txn<'_>, ns: &Namespace) -> Result<Arc<CollMeta>> {
        txn.catalog()
            .get(&Namespace::new(&ns.db, SYSTEM_VIEWS))
            .ok_or_else(|| {
                Error::internal(format!(
                    "view {} has no {}.{SYSTEM_VIEWS}",
                    ns.full(),
                    ns.db
                ))
            })
    }
}
