//! The in-memory store's conversation sessions and memory bank: `store::session` and
//! `store::bank` over the store's own maps.

use futures_util::future::BoxFuture;

use super::InMemoryStore;
use crate::store::StoreError;
use crate::store::backend::{bad_session_id, check_address, check_session_id, query_terms, session_denied, sort_hits};
use crate::store::bank::{MemoryAddress, MemoryBank, MemoryHit, MemoryItem, MemorySearch};
use crate::store::session::{Appended, SessionAppend, SessionMessage, SessionOwner, SessionStore};

/// A session as [`InMemoryStore`] keeps it.
#[derive(Debug, Default)]
pub(crate) struct MemorySession {
    owner: SessionOwner,
    next_seq: u64,
    messages: std::collections::VecDeque<SessionMessage>,
    keys: std::collections::HashSet<String>,
}
impl SessionStore for InMemoryStore {
    fn session_history(
        &self,
        session: &str,
        owner: &SessionOwner,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionMessage>, StoreError>> {
        let result = (|| {
            check_session_id(session).map_err(bad_session_id)?;
            let sessions = self.sessions.lock().expect("poisoned");
            let Some(found) = sessions.get(session) else { return Ok(Vec::new()) };
            if &found.owner != owner {
                return Err(session_denied(session));
            }
            let skip = found.messages.len().saturating_sub(limit);
            Ok(found.messages.iter().skip(skip).cloned().collect())
        })();
        Box::pin(std::future::ready(result))
    }

    fn append_to_session(&self, append: SessionAppend) -> BoxFuture<'_, Result<Appended, StoreError>> {
        let result = (|| {
            check_session_id(&append.session).map_err(bad_session_id)?;
            let mut sessions = self.sessions.lock().expect("poisoned");
            let found = sessions
                .entry(append.session.clone())
                .or_insert_with(|| MemorySession { owner: append.owner.clone(), ..MemorySession::default() });
            if found.owner != append.owner {
                return Err(session_denied(&append.session));
            }
            if !found.keys.insert(append.key) {
                return Ok(Appended { applied: false, stored: found.messages.len() as u64 });
            }
            for message in append.messages {
                found.messages.push_back(SessionMessage { seq: found.next_seq, message });
                found.next_seq += 1;
            }
            while found.messages.len() > append.max_stored {
                found.messages.pop_front();
            }
            Ok(Appended { applied: true, stored: found.messages.len() as u64 })
        })();
        Box::pin(std::future::ready(result))
    }

    fn delete_session(&self, session: &str, owner: &SessionOwner) -> BoxFuture<'_, Result<bool, StoreError>> {
        let mut sessions = self.sessions.lock().expect("poisoned");
        let result = match sessions.get(session) {
            None => Ok(false),
            Some(found) if &found.owner != owner => Err(session_denied(session)),
            Some(_) => Ok(sessions.remove(session).is_some()),
        };
        Box::pin(std::future::ready(result))
    }
}

impl MemoryBank for InMemoryStore {
    fn memory_put(&self, item: MemoryItem) -> BoxFuture<'_, Result<(), StoreError>> {
        let result = check_address(&item.address).map(|()| {
            self.bank.lock().expect("poisoned").insert(item.address.clone(), item);
        });
        Box::pin(std::future::ready(result))
    }

    fn memory_get(&self, address: MemoryAddress) -> BoxFuture<'_, Result<Option<MemoryItem>, StoreError>> {
        let found = self.bank.lock().expect("poisoned").get(&address).cloned();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn memory_search(&self, search: MemorySearch) -> BoxFuture<'_, Result<Vec<MemoryHit>, StoreError>> {
        let bank = self.bank.lock().expect("poisoned");
        let mut hits: Vec<MemoryHit> = Vec::new();
        let terms = search.query.as_deref().map(query_terms);
        for item in bank.values().filter(|item| {
            let a = &item.address;
            a.tenant == search.tenant && a.scope == search.scope && a.namespace == search.namespace
        }) {
            let score = match &terms {
                None => 0.0,
                Some(terms) => {
                    let words = query_terms(&item.text);
                    // How many of the query's words the item has: a plain stand-in for the
                    // backends' relevance scores, with the same ordering promise.
                    let matched = terms.iter().filter(|t| words.contains(t)).count();
                    if matched == 0 {
                        continue;
                    }
                    matched as f64
                }
            };
            hits.push(MemoryHit { item: item.clone(), score });
        }
        sort_hits(&mut hits);
        hits.truncate(search.limit);
        Box::pin(std::future::ready(Ok(hits)))
    }

    fn memory_delete(&self, address: MemoryAddress) -> BoxFuture<'_, Result<bool, StoreError>> {
        let removed = self.bank.lock().expect("poisoned").remove(&address).is_some();
        Box::pin(std::future::ready(Ok(removed)))
    }
}
