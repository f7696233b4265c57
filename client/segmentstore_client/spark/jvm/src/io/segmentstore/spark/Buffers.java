// Reusable heap arrays for the reader's large reads (a task's event buffer and the
// frames of its 2 MiB ReadSegment replies). Spark's driver heap is a G1 heap whose
// regions are 1 MiB at the default 2 GiB or less, so every array of 512 KiB or more is a
// humongous object, and allocating one can start a collection by itself ("G1 Humongous
// Allocation"): before this pool a task allocated a 4 MiB event buffer and a new frame
// per 2 MiB read, and 30 one-column reads of 1 M rows started 26 such collections
// (jdk.GarbageCollection in a JFR recording, 7 ms of pauses per query; see the README's
// session 12). Arrays of at least MIN_BYTES are kept here between tasks, at most
// MAX_POOLED of them and none larger than MAX_BYTES, so memory stays bounded. An array
// has one owner at a time: take() removes it from the pool, and its owner gives it back
// only once no thread can still write it. A taken array holds whatever its last owner
// left in it; owners read only the bytes they wrote. Holds bytes only, never data across
// queries: every read still goes to the server.
package io.segmentstore.spark;

import java.util.ArrayDeque;
import java.util.Iterator;

final class Buffers {
  /** Smaller arrays are plain allocations (G1 allocates them in the young generation). */
  static final int MIN_BYTES = 256 * 1024;
  /** Larger arrays (a rare large event's buffer, a hostile 16 MiB frame) are left to the
   * collector, so the pool holds at most 32 MiB. */
  static final int MAX_BYTES = 4 * 1024 * 1024;
  /** Arrays kept at most: two per running task for up to four tasks per JVM. */
  static final int MAX_POOLED = 8;

  private static final ArrayDeque<byte[]> POOL = new ArrayDeque<>();

  private Buffers() {}

  /** An array of at least {@code n} bytes, from the pool when one is there. */
  static byte[] take(int n) {
    if (n < MIN_BYTES) {
      return new byte[n];
    }
    synchronized (POOL) {
      // The smallest that fits: a frame must not take the event buffer the next task needs.
      byte[] best = null;
      for (byte[] b : POOL) {
        if (b.length >= n && (best == null || b.length < best.length)) {
          best = b;
        }
      }
      if (best != null) {
        for (Iterator<byte[]> it = POOL.iterator(); it.hasNext(); ) {
          if (it.next() == best) {
            it.remove();
            break;
          }
        }
        return best;
      }
    }
    // Rounded up to 256 KiB, so a slightly longer frame later still fits a pooled array.
    long rounded = ((long) n + MIN_BYTES - 1) / MIN_BYTES * MIN_BYTES;
    return new byte[(int) Math.min(rounded, Integer.MAX_VALUE - 8)];
  }

  /** Gives {@code b} back; its owner must not touch it afterwards. */
  static void give(byte[] b) {
    if (b == null || b.length < MIN_BYTES || b.length > MAX_BYTES) {
      return;
    }
    synchronized (POOL) {
      for (byte[] x : POOL) {
        if (x == b) {
          return; // given twice: pooled once, never handed to two owners
        }
      }
      if (POOL.size() < MAX_POOLED) {
        POOL.addFirst(b);
      }
    }
  }

  /** How many arrays the pool holds now (for tests). */
  static int pooled() {
    synchronized (POOL) {
      return POOL.size();
    }
  }
}
