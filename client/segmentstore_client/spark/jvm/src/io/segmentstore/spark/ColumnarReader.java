// A read task: the events of one Planner.Range as Spark ColumnarBatches (one per Arrow
// record batch the sink wrote, 10,000 rows by default) of the pruned read schema. Each
// event's envelope is checked (CRC-32C, layout) before its Arrow stream is decoded; rows
// in MessagePack or any other content type are refused with a message, never guessed at.
// Fetching, checking and decoding run on a thread of the reader's own, at most AHEAD
// batches ahead of Spark, so they overlap Spark's consumption of the batch before; its
// failure is thrown from next() as it was raised, and close() stops it (interrupt, then
// the socket closed) before any Arrow memory is released or its read arrays are given
// back to Buffers (never while the thread may still run). A batch stays valid until the
// next call to next() or close(). Also the factory Spark serializes to the executors
// (columnar reads only).
package io.segmentstore.spark;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.io.UncheckedIOException;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

final class ColumnarReader implements PartitionReader<ColumnarBatch> {
  /** Decoded batches queued ahead of Spark (each holds its own Arrow memory). */
  static final int AHEAD = 2;
  /** How long close() waits for the decoding thread to stop. */
  static final long STOP_MILLIS = 10_000;

  private static final Object END = new Object();

  /** One decoded batch and the Arrow root holding its memory. */
  private static final class Decoded {
    final VectorSchemaRoot root;
    final ColumnarBatch batch;

    Decoded(VectorSchemaRoot root, ColumnarBatch batch) {
      this.root = root;
      this.batch = batch;
    }
  }

  /** What the decoding thread failed with, for next() to throw. */
  private static final class Failure {
    final Throwable cause;

    Failure(Throwable cause) {
      this.cause = cause;
    }
  }

  private final Planner.Range range;
  private final BufferAllocator allocator;
  private final EventSource events;
  private final ArrowEvents arrow;
  private final BlockingQueue<Object> ready = new ArrayBlockingQueue<>(AHEAD);
  private final Thread decoder;
  private volatile boolean closing;
  private Decoded current; // handed to Spark; released at the next next()
  private boolean ended;
  private boolean inEvent; // decoding thread only
  // Timing (only with -Dsegmentstore.jvm.timing=true): nanoseconds per step. fetch, crc
  // and decode are the decoding thread's; wait and spark the task thread's.
  private final long born = Timing.now();
  private long outside = born; // when next() last returned
  private long tFetch;
  private long tCrc;
  private long tDecode;
  private long tWait;
  private long tSpark;
  private volatile long tFirst; // born -> the first batch queued (decoding thread)
  private int batches;

  ColumnarReader(ReadOptions o, StructType schema, Planner.Range range) throws IOException {
    this.range = range;
    long t = Timing.now();
    this.events = new EventSource(
            new WireClient(o), range.segment, range.start, range.end, EventSource.READ_BYTES);
    Timing.log("task-connect", t, range.toString());
    this.allocator = Allocators.child("segmentstore-jvm read " + range);
    this.arrow = new ArrowEvents(allocator, schema);
    this.decoder = new Thread(this::decodeAll, "segmentstore-jvm " + range);
    decoder.setDaemon(true);
    decoder.start();
  }

  /** The decoding thread: every batch of the range into the queue, then END or a Failure. */
  private void decodeAll() {
    try {
      while (!closing && advance()) {
        Decoded d = new Decoded(arrow.detachRoot(), arrow.batch());
        if (Timing.ON && tFirst == 0) {
          tFirst = Timing.now() - born;
        }
        try {
          ready.put(d);
        } catch (InterruptedException e) {
          d.root.close();
          return;
        }
      }
      ready.put(END);
    } catch (InterruptedException e) {
      // close() stops this thread
    } catch (Throwable t) { // every failure reaches next(), whatever its kind
      if (!closing) {
        try {
          ready.put(new Failure(t));
        } catch (InterruptedException e) {
          // close() stops this thread
        }
      }
    }
  }

  @Override
  public boolean next() throws IOException {
    long t0 = Timing.now();
    tSpark += t0 - outside;
    release();
    if (ended) {
      return false;
    }
    Object o;
    try {
      o = ready.take();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt(); // Spark is killing the task
      throw new InterruptedIOException(
          "segmentstore-jvm: reading " + range + " was interrupted");
    }
    outside = Timing.now();
    tWait += outside - t0;
    if (o == END) {
      ended = true;
      return false;
    }
    if (o instanceof Failure) {
      ended = true;
      Throwable t = ((Failure) o).cause;
      if (t instanceof IOException) {
        throw (IOException) t;
      }
      if (t instanceof RuntimeException) {
        throw (RuntimeException) t;
      }
      if (t instanceof Error) {
        throw (Error) t;
      }
      throw new IOException("segmentstore-jvm: reading " + range + " failed: " + t, t);
    }
    current = (Decoded) o;
    batches++;
    return true;
  }

  private void release() {
    if (current != null) {
      current.root.close();
      current = null;
    }
  }

  private boolean advance() throws IOException {
    // Bounded: every pass either yields a batch or consumes one event of the range.
    while (true) {
      long t = Timing.now();
      if (inEvent && arrow.next()) {
        tDecode += Timing.now() - t;
        return true;
      }
      inEvent = false;
      t = Timing.now();
      boolean more = events.next();
      tFetch += Timing.now() - t;
      if (!more) {
        return false;
      }
      t = Timing.now();
      Envelope e =
          Envelope.open(range.segment, events.offset, events.buf(), events.dataOffset,
              events.length);
      tCrc += Timing.now() - t;
      if (!Envelope.ARROW.equals(e.contentType)) {
        String what =
            Envelope.MSGPACK.equals(e.contentType)
                ? "holds MessagePack rows (encoding=msgpack)"
                : "has content-type '" + e.contentType + "', not rows written by the Spark "
                    + "integration";
        throw new IOException(
            "segmentstore-jvm: segment '" + range.segment + "', event at offset "
                + events.offset + " " + what + "; the JVM reader reads Arrow rows only: "
                + "read it with format('segmentstore')");
      }
      t = Timing.now();
      arrow.open(e, range.segment, events.offset);
      tDecode += Timing.now() - t;
      inEvent = true;
    }
  }

  @Override
  public ColumnarBatch get() {
    return current.batch;
  }

  @Override
  public void close() throws IOException {
    closing = true;
    decoder.interrupt();
    boolean stopped;
    try {
      events.close(); // a read blocked on the socket ends now
    } finally {
      try {
        decoder.join(STOP_MILLIS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      stopped = !decoder.isAlive();
    }
    Timing.log(
        "task", born,
        String.format(
            "%s first %.1f fetch %.1f crc %.1f decode %.1f wait %.1f spark %.1f ms, %d batches",
            range, tFirst / 1e6, tFetch / 1e6, tCrc / 1e6, tDecode / 1e6, tWait / 1e6,
            tSpark / 1e6, batches));
    if (!stopped) {
      // Never free memory a running thread may still write: leave it to the collector.
      throw new IOException("segmentstore-jvm: reading " + range + " did not stop within "
          + STOP_MILLIS + " ms of close()");
    }
    release();
    for (Object o = ready.poll(); o != null; o = ready.poll()) {
      if (o instanceof Decoded) {
        ((Decoded) o).root.close();
      }
    }
    try {
      arrow.close();
    } finally {
      try {
        allocator.close();
      } finally {
        events.recycle(); // the decoding thread has stopped: no one writes these arrays now
      }
    }
  }

  /** What Spark ships to the executors: the options and the pruned schema. */
  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final ReadOptions options;
    private final StructType schema;

    Factory(ReadOptions options, StructType schema) {
      this.options = options;
      this.schema = schema;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("segmentstore-jvm reads columnar batches only");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      try {
        return new ColumnarReader(options, schema, (Planner.Range) partition);
      } catch (IOException e) {
        throw new UncheckedIOException(e.getMessage(), e);
      }
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }
  }
}
