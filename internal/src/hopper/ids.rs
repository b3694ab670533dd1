//! Conn ids: validation of client ids and issuing of new ones (SPEC section 4, `[affinity] ids`).
//!
//! `client` mode takes an id as is when it is 1-128 bytes of visible ASCII. `signed` mode issues
//! `<uuid-v4>.<hex HMAC-SHA256 tag>` and accepts only ids whose tag verifies under the current key or
//! an accepted old key; comparison is constant-time.

use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::config::IdMode;

/// Longest accepted id in bytes (SPEC section 4).
pub const MAX_ID_LEN: usize = 128;

/// Why an id was refused; each maps to 400 with a JSON body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Empty.
    #[error("empty conn id")]
    Empty,
    /// Over 128 bytes.
    #[error("conn id longer than 128 bytes")]
    TooLong,
    /// A byte outside visible ASCII (0x21-0x7E).
    #[error("conn id has characters outside visible ASCII")]
    BadChars,
    /// Signed mode: the tag does not verify.
    #[error("conn id signature does not verify")]
    Forged,
}

/// A conn id that passed the SPEC section 5 rules once ([`ConnIds::parse`]; the syntax rules
/// alone for an id an operator names or a store reports, [`ConnId::checked`]) or was issued by
/// the gateway ([`ConnIds::issue`]): 1-128 bytes of visible ASCII, so it is always a valid header
/// value. Cheap to clone (shared); reads as `&str`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnId(Arc<str>);

impl ConnId {
    /// Checks `raw` against the syntax rules of SPEC section 5 (1-128 bytes of visible ASCII)
    /// without the signed-mode tag check: for an id an operator names (the admin API), which may
    /// have been signed under a key since retired, and for ids read back from a shared store.
    ///
    /// # Errors
    /// [`IdError`] naming the first rule broken.
    pub fn checked(raw: &[u8]) -> Result<ConnId, IdError> {
        if raw.is_empty() {
            return Err(IdError::Empty);
        }
        if raw.len() > MAX_ID_LEN {
            return Err(IdError::TooLong);
        }
        if !raw.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return Err(IdError::BadChars);
        }
        let id = std::str::from_utf8(raw).map_err(|_| IdError::BadChars)?;
        Ok(ConnId(Arc::from(id)))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for ConnId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Validates and issues conn ids.
#[derive(Clone)]
pub struct ConnIds {
    mode: IdMode,
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for ConnIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnIds")
            .field("mode", &self.mode)
            .field("keys", &self.keys.len())
            .finish()
    }
}

type HmacSha256 = Hmac<Sha256>;

impl ConnIds {
    /// `keys[0]` signs; every key verifies. In `client` mode keys are unused.
    pub fn new(mode: IdMode, keys: Vec<Vec<u8>>) -> Self {
        ConnIds { mode, keys }
    }

    /// Id mode.
    pub fn mode(&self) -> IdMode {
        self.mode
    }

    /// Checks a client-sent id (raw header bytes).
    ///
    /// # Errors
    /// [`IdError`] naming the first rule broken.
    pub fn parse(&self, raw: &[u8]) -> Result<ConnId, IdError> {
        let id = ConnId::checked(raw)?;
        if self.mode == IdMode::Signed && !self.verify(&id) {
            return Err(IdError::Forged);
        }
        Ok(id)
    }

    /// A new id: a UUID v4, signed in `signed` mode.
    pub fn issue(&self) -> ConnId {
        let uuid = uuid::Uuid::new_v4().to_string();
        ConnId(Arc::from(match (self.mode, self.keys.first()) {
            (IdMode::Signed, Some(key)) => {
                let tag = tag(key, &uuid);
                format!("{uuid}.{}", hex::encode(tag))
            }
            _ => uuid,
        }))
    }

    fn verify(&self, id: &str) -> bool {
        let Some((body, tag_hex)) = id.rsplit_once('.') else {
            return false;
        };
        let Ok(given) = hex::decode(tag_hex) else {
            return false;
        };
        self.keys.iter().any(|key| {
            let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
            mac.update(body.as_bytes());
            // verify_slice compares in constant time.
            mac.verify_slice(&given).is_ok()
        })
    }
}

/// A conn id from a test's literal (which follows the syntax rules).
#[cfg(test)]
pub(crate) fn test_id(s: &str) -> ConnId {
    ConnId::checked(s.as_bytes()).expect("a test's conn id follows the syntax rules")
}

fn tag(key: &[u8], body: &str) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(body.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_are_checked_for_length_and_charset() {
        let ids = ConnIds::new(IdMode::Client, vec![]);
        assert_eq!(ids.parse(b"c-1001").as_deref(), Ok("c-1001"));
        assert_eq!(ids.parse(&[b'a'; 128]).as_deref(), Ok(&*"a".repeat(128)));
        assert_eq!(ids.parse(&[b'a'; 129]), Err(IdError::TooLong));
        assert_eq!(ids.parse(b"a\x01b"), Err(IdError::BadChars));
        assert_eq!(ids.parse(b"a b"), Err(IdError::BadChars));
        assert_eq!(ids.parse(b""), Err(IdError::Empty));
        assert_eq!(
            uuid::Uuid::parse_str(&ids.issue()).map(|u| u.get_version_num()),
            Ok(4)
        );
    }

    #[test]
    fn signed_ids_verify_and_forgeries_do_not() {
        let ids = ConnIds::new(
            IdMode::Signed,
            vec![b"new-key".to_vec(), b"old-key".to_vec()],
        );
        let id = ids.issue();
        assert!(id.len() <= MAX_ID_LEN);
        assert_eq!(ids.parse(id.as_bytes()).as_ref(), Ok(&id));
        let old = ConnIds::new(IdMode::Signed, vec![b"old-key".to_vec()]).issue();
        assert!(
            ids.parse(old.as_bytes()).is_ok(),
            "rotated key still accepted"
        );
        let forged = ConnIds::new(IdMode::Signed, vec![b"other".to_vec()]).issue();
        assert_eq!(ids.parse(forged.as_bytes()), Err(IdError::Forged));
        let truncated = &id[..id.len() - 2];
        assert_eq!(ids.parse(truncated.as_bytes()), Err(IdError::Forged));
        let retagged = format!("{}.{}", uuid::Uuid::new_v4(), &id[37..]);
        assert_eq!(ids.parse(retagged.as_bytes()), Err(IdError::Forged));
        assert_eq!(ids.parse(b"plain-id"), Err(IdError::Forged));
    }
}
