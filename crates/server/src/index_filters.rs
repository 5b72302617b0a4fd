//! Index filters (`planCacheSetFilter`, `planCacheListFilters`, `planCacheClearFilters`):
//! per collection, the indexes a query shape may use. Kept in memory, by collection
//! UUID, as mongod keeps them on the collection (they go with a drop or a restart). A
//! filter replaces the one set before for the same shape: the query's fields and
//! operators without their values, with the same sort, projection and collation.
//! The planner does not read them yet: it picks an index per query, from the query.

use bson::{doc, Bson, Document};
use parking_lot::RwLock;
use std::collections::HashMap;

/// One filter, as `planCacheListFilters` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    pub query: Document,
    pub sort: Document,
    pub projection: Document,
    pub collation: Option<Document>,
    pub indexes: Vec<Bson>,
}

impl Filter {
    /// The key of its query shape.
    fn shape(&self) -> Document {
        let mut key = doc! {
            "query": shape_of(&self.query),
            "sort": self.sort.clone(),
            "projection": self.projection.clone(),
        };
        if let Some(c) = &self.collation {
            key.insert("collation", c.clone());
        }
        key
    }

    fn report(&self) -> Document {
        let mut out = doc! {
            "query": self.query.clone(),
            "sort": self.sort.clone(),
            "projection": self.projection.clone(),
        };
        if let Some(c) = &self.collation {
            out.insert("collation", c.clone());
        }
        out.insert("indexes", self.indexes.clone());
        out
    }
}

/// A filter document's shape: every value that is no operator's document becomes
/// null, so `{a: 1}` and `{a: 5}` are one shape, `{a: {$gt: 1}}` another.
fn shape_of(query: &Document) -> Document {
    query
        .iter()
        .map(|(k, v)| {
            let shaped = match v {
                Bson::Document(d) => Bson::Document(shape_of(d)),
                Bson::Array(a) if k.starts_with('$') => Bson::Array(
                    a.iter()
                        .map(|e| match e {
                            Bson::Document(d) => Bson::Document(shape_of(d)),
                            _ => Bson::Null,
                        })
                        .collect(),
                ),
                _ => Bson::Null,
            };
            (k.clone(), shaped)
        })
        .collect()
}

/// Every collection's filters, by collection UUID, in the order they were set.
#[derive(Default)]
pub struct IndexFilters {
    by_collection: RwLock<HashMap<bson::Uuid, Vec<Filter>>>,
}

impl IndexFilters {
    /// Sets `filter`, replacing the one of the same shape.
    pub fn set(&self, collection: bson::Uuid, filter: Filter) {
        let mut all = self.by_collection.write();
        let filters = all.entry(collection).or_default();
        let shape = filter.shape();
        match filters.iter_mut().find(|f| f.shape() == shape) {
            Some(existing) => *existing = filter,
            None => filters.push(filter),
        }
    }

    /// The collection's filters, as `planCacheListFilters` lists them.
    pub fn list(&self, collection: bson::Uuid) -> Vec<Document> {
        self.by_collection
            .read()
            .get(&collection)
            .map(|f| f.iter().map(Filter::report).collect())
            .unwrap_or_default()
    }

    /// Clears the filter of `shape`'s shape (its indexes are ignored), or all of them.
    pub fn clear(&self, collection: bson::Uuid, shape: Option<&Filter>) {
        let mut all = self.by_collection.write();
        match shape {
            None => {
                all.remove(&collection);
            }
            Some(s) => {
                let key = s.shape();
                if let Some(filters) = all.get_mut(&collection) {
                    filters.retain(|f| f.shape() != key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(query: Document, indexes: Vec<Bson>) -> Filter {
        Filter {
            query,
            sort: Document::new(),
            projection: Document::new(),
            collation: None,
            indexes,
        }
    }

    #[test]
    fn one_filter_per_shape() {
        let filters = IndexFilters::default();
        let c = bson::Uuid::new();
        filters.set(c, filter(doc! {"a": 1}, vec![Bson::String("a_1".into())]));
        filters.set(c, filter(doc! {"a": 5}, vec![Bson::String("b_1".into())]));
        filters.set(
            c,
            filter(doc! {"a": {"$gt": 1}}, vec![Bson::String("a_1".into())]),
        );
        let listed = filters.list(c);
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].get_document("query").unwrap(), &doc! {"a": 5});
        assert_eq!(
            listed[0].get_array("indexes").unwrap(),
            &vec![Bson::String("b_1".into())]
        );
        filters.clear(c, Some(&filter(doc! {"a": 99}, vec![])));
        assert_eq!(filters.list(c).len(), 1);
        filters.clear(c, None);
        assert!(filters.list(c).is_empty());
        assert!(filters.list(bson::Uuid::new()).is_empty());
    }
}
