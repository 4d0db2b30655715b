//! What a connection sends, bounded in bytes: replies and subscription traffic wait for room in
//! the connection's byte budget, so a client that stops reading holds at most that much of the
//! daemon's memory (its subscriptions then fall behind the live stream and resume from disk).
//!
//! Append acknowledgements do not wait: they come from the commit thread, which must never
//! block on a client. They are bounded instead by the appends a connection may have in flight.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// A frame on its way to the socket, holding its share of the budget until written.
pub struct Frame {
    pub bytes: Vec<u8>,
    pub _held: OwnedSemaphorePermit,
}

/// The sending side of one connection's outbound queue. Cheap to clone.
#[derive(Clone)]
pub struct Outbound {
    tx: mpsc::UnboundedSender<Frame>,
    budget: Arc<Semaphore>,
    cap: usize,
}

/// The connection is gone.
#[derive(Debug)]
pub struct Closed;

impl Outbound {
    /// A queue that holds at most `cap_bytes` (a single larger frame is let through alone).
    pub fn new(cap_bytes: usize) -> (Outbound, mpsc::UnboundedReceiver<Frame>) {
        let cap = cap_bytes.clamp(1, Semaphore::MAX_PERMITS);
        let (tx, rx) = mpsc::unbounded_channel();
        let out = Outbound {
            tx,
            budget: Arc::new(Semaphore::new(cap)),
            cap,
        };
        (out, rx)
    }

    /// Queues a frame, waiting while the queue holds its fill.
    /// The connection's writer is gone: nothing sent now reaches the client.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    pub async fn send(&self, bytes: Vec<u8>) -> Result<(), Closed> {
        let need = bytes.len().clamp(1, self.cap) as u32;
        let held = self
            .budget
            .clone()
            .acquire_many_owned(need)
            .await
            .map_err(|_| Closed)?;
        self.tx
            .send(Frame { bytes, _held: held })
            .map_err(|_| Closed)
    }

    /// Queues a frame without waiting, holding `permit` (an in-flight append's) instead of
    /// budget: for acknowledgements from the commit thread.
    pub fn send_now(&self, bytes: Vec<u8>, permit: OwnedSemaphorePermit) -> Result<(), Closed> {
        self.tx
            .send(Frame {
                bytes,
                _held: permit,
            })
            .map_err(|_| Closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_waits_until_frames_are_written() {
        let (out, mut rx) = Outbound::new(1000);
        out.send(vec![b'x'; 600]).await.unwrap();
        // 600 + 600 > 1000: the second send waits for the first frame to be written.
        let second = tokio::spawn({
            let out = out.clone();
            async move { out.send(vec![b'y'; 600]).await }
        });
        tokio::task::yield_now().await;
        assert!(!second.is_finished());
        let first = rx.recv().await.unwrap();
        drop(first);
        second.await.unwrap().unwrap();
        assert_eq!(rx.recv().await.unwrap().bytes.len(), 600);
        // A frame bigger than the whole budget still goes through, alone.
        out.send(vec![b'z'; 5000]).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().bytes.len(), 5000);
    }
}
