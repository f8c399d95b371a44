//! `keys create|list|revoke`: API keys for the HTTP API, managed by whoever may open the
//! store. Every change is written to the audit log.

use anyhow::anyhow;
use serde_json::json;
use stepwright::backends::control::AuditEntry;

use crate::args::KeysCommand;
use crate::commands::Globals;
use crate::exit::BadInput;
use crate::host::{CliStore, open_store};
use crate::time::clock_time;
use crate::time::wall_now;

/// `keys`: opens the store, then the subcommand.
pub(crate) async fn keys(g: &Globals<'_>, command: KeysCommand) -> anyhow::Result<u8> {
    let store = open_store(g.db).await?;
    match command {
        KeysCommand::Create { namespace, user, roles, expires_in_days, json } => {
            let now = wall_now();
            let expires_at =
                expires_in_days.map(|days| now.plus(std::time::Duration::from_secs(u64::from(days) * 86_400)));
            let created = stepwright::server::create_key(store.as_ref(), &namespace, &user, &roles, expires_at, now)
                .await
                .map_err(|e| match e {
                    stepwright::server::KeyError::Invalid(why) => anyhow!(BadInput(why)),
                    other => anyhow!(other),
                })?;
            audit(store.as_ref(), &namespace, "key.created", &created.key.id, json!({ "user": user, "roles": roles }))
                .await?;
            if json {
                println!(
                    "{}",
                    json!({ "id": created.key.id, "secret": created.secret, "namespace": namespace, "user": user, "roles": roles })
                );
            } else {
                println!("{}", created.secret);
                eprintln!(
                    "created key {} for {user} in namespace {namespace} ({}); the secret above is shown only now",
                    created.key.id,
                    roles.join(", ")
                );
            }
            Ok(0)
        }
        KeysCommand::List { namespace, json } => {
            let keys = store.keys(namespace.as_deref()).await?;
            let now = wall_now();
            if !json {
                println!("{:<16} {:<16} {:<16} {:<28} STATE", "ID", "NAMESPACE", "USER", "ROLES");
            }
            for key in keys {
                let state = match (key.revoked_at, key.expires_at) {
                    (Some(at), _) => format!("revoked {}", clock_time(at)),
                    (None, Some(at)) if at <= now => format!("expired {}", clock_time(at)),
                    _ => key
                        .last_used_at
                        .map_or_else(|| "never used".to_owned(), |at| format!("used {}", clock_time(at))),
                };
                if json {
                    println!("{}", serde_json::to_string(&key)?);
                } else {
                    println!(
                        "{:<16} {:<16} {:<16} {:<28} {state}",
                        key.id,
                        key.namespace,
                        key.user,
                        key.roles.join(",")
                    );
                }
            }
            Ok(0)
        }
        KeysCommand::Revoke { id } => {
            let namespace = store.keys(None).await?.into_iter().find(|key| key.id == id).map(|key| key.namespace);
            let Some(namespace) = namespace else {
                return Err(anyhow!(BadInput(format!("no key {id:?}"))));
            };
            if !store.revoke_key(&id, wall_now()).await? {
                eprintln!("key {id} was revoked already");
                return Ok(0);
            }
            audit(store.as_ref(), &namespace, "key.revoked", &id, json!({})).await?;
            eprintln!("revoked key {id}");
            Ok(0)
        }
    }
}

async fn audit(
    store: &dyn CliStore,
    namespace: &str,
    action: &str,
    subject: &str,
    detail: serde_json::Value,
) -> anyhow::Result<()> {
    let actor = std::env::var("USER").map_or_else(|_| "cli".to_owned(), |user| format!("cli ({user})"));
    let entry = AuditEntry {
        namespace: namespace.to_owned(),
        at: wall_now(),
        actor,
        action: action.to_owned(),
        subject: subject.to_owned(),
        detail,
    };
    Ok(store.audit(entry).await?)
}
