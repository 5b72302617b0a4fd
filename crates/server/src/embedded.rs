//! Commands run in-process, without a socket: a server's state over a store of its own
//! and one connection, for the `command` fuzz target (fuzz/) to take a command document
//! through the same gates and handlers as a client's, down to the engine and RocksDB.
//! Nothing here listens, replicates or runs background tasks (TTL, idle cursors).

use crate::commands::{self, Conn};
use crate::config::Config;
use crate::state::ServerState;
use bson::Document;
use clap::Parser;
use std::path::Path;
use std::sync::Arc;
use tailstream_engine::Engine;

/// A server without listeners and its one connection.
pub struct Embedded {
    state: Arc<ServerState>,
    conn: Conn,
}

impl Embedded {
    /// The server `tailstream --dbpath <dbpath> <args>` would start, with no listener.
    pub fn open(dbpath: &Path, args: &[&str]) -> Result<Embedded, String> {
        let mut argv = vec!["tailstream".to_string(), "--dbpath".to_string()];
        argv.push(dbpath.display().to_string());
        argv.extend(args.iter().map(|a| a.to_string()));
        let config = Config::try_parse_from(argv).map_err(|e| e.to_string())?;
        let engine = Engine::open(config.engine_options()).map_err(|e| e.message)?;
        let state = Arc::new(ServerState::new(config, engine)?);
        let conn = Conn::register(&state, "embedded".to_string());
        Ok(Embedded { state, conn })
    }

    /// Runs one command (its `$db` field names the database) as an OP_MSG's body, and
    /// returns its reply as a client reads it.
    pub async fn run(&mut self, cmd: Document) -> Document {
        let reply =
            commands::dispatch(&self.state, &mut self.conn, Arc::new(cmd), None, None).await;
        reply.body.into_document()
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        self.state.current_ops.disconnect(self.conn.id);
        self.state.engine.shutdown();
    }
}
