//! Compressing a session: its log up to the last synced LSN goes into its archive (see
//! [`super::archive`]), which is made durable and renamed into place, then installed for
//! readers, and only then is the log's first part given back to the file system. Appends go
//! on at the end of the log as before, so a resumed session needs nothing special, and a
//! crash at any step leaves either the old form or the new one, each whole: before the rename
//! the archive does not exist; after it, the log is read from where the archive ends (a hole
//! or the old bytes, it does not matter which).

use std::io;
use std::sync::Arc;

use super::Store;
use super::archive::{self, Archive};
use super::error::StoreError;
use super::types::Compressed;

impl Store {
    /// Compresses session `id` up to its last synced LSN. Blocking: call it off the async
    /// workers, and at most one at a time per session. `None` when there is nothing new.
    pub fn compress_blocking(&self, id: &str) -> Result<Option<Compressed>, StoreError> {
        self.compress_as(id, None)
    }

    /// The archive's announcement count, 0 for a session never archived with one.
    pub fn archive_generation(&self, id: &str) -> u32 {
        self.get(id)
            .and_then(|s| {
                s.archive
                    .read()
                    .unwrap()
                    .as_ref()
                    .map(|a| a.footer.generation)
            })
            .unwrap_or(0)
    }

    /// [`Store::compress_blocking`], recording `generation` (see
    /// [`Store::archive_generation`]) when the session was just announced as archived.
    pub fn compress_as(
        &self,
        id: &str,
        generation: Option<u32>,
    ) -> Result<Option<Compressed>, StoreError> {
        let ctx = |context: &'static str| move |e: io::Error| StoreError::io(context, &e);
        let Some(session) = self.get(id) else {
            return Err(StoreError::NotFound(id.into()));
        };
        if let Some(reason) = session.quarantine_reason() {
            return Err(StoreError::Quarantined {
                session: id.into(),
                reason: reason.into(),
            });
        }
        let upto = session.durable_lsn();
        let old = session.archive.read().unwrap().clone();
        if upto == 0 || old.as_ref().is_some_and(|a| a.footer.upto_lsn >= upto) {
            return Ok(None);
        }
        let vfs = &*self.inner.vfs;
        let log = session.read_handle().map_err(ctx("opening the log"))?;
        let meta = session.meta();
        let zst = archive::path_for(&session.path);
        let tmp = zst.with_extension("zst.tmp");
        let generation =
            generation.unwrap_or_else(|| old.as_ref().map_or(0, |a| a.footer.generation));
        let footer = archive::build(
            vfs,
            &*log,
            old.as_deref(),
            upto,
            (meta.first_ts, meta.last_ts, meta.stream_id),
            generation,
            &tmp,
        )
        .map_err(|e| {
            let _ = vfs.remove(&tmp);
            StoreError::io("writing the archive", &e)
        })?;
        vfs.rename(&tmp, &zst)
            .and_then(|()| vfs.sync_dir(&self.inner.sessions_dir))
            .map_err(ctx("installing the archive"))?;
        // Retention deleted the session meanwhile: its archive goes too.
        if let Some(t) = self.gone(id) {
            let _ = vfs.remove(&zst);
            let _ = vfs.sync_dir(&self.inner.sessions_dir);
            return Err(t.error());
        }
        let installed = Archive::open(vfs, &zst)
            .map_err(ctx("reading the new archive"))?
            .ok_or_else(|| {
                StoreError::io("reading the new archive", &io::ErrorKind::NotFound.into())
            })?;
        let archive_bytes = vfs
            .open(&zst, crate::vfs::Open::Existing)
            .and_then(|f| f.len())
            .unwrap_or(0);
        // Readers from now on read up to `upto` from the archive; those still reading the log
        // hold the lock, so this waits for them.
        *session.archive.write().unwrap() = Some(Arc::new(installed));
        let freed = log
            .punch_hole(0, footer.covers_bytes)
            .and_then(|freed| log.sync().map(|()| freed))
            .map_err(ctx("freeing the compressed part of the log"))?;
        Ok(Some(Compressed {
            upto_lsn: footer.upto_lsn,
            log_bytes: footer.covers_bytes,
            archive_bytes,
            freed,
        }))
    }
}
