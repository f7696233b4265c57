// A read task: the events of one Planner.Range as Spark ColumnarBatches (one per Arrow
// record batch the sink wrote, 10,000 rows by default) of the pruned read schema. Each
// event's envelope is checked (CRC-32C, layout) before its Arrow stream is decoded; rows
// in MessagePack or any other content type are refused with a message, never guessed at.
// Also the factory Spark serializes to the executors (columnar reads only).
package io.segmentstore.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

final class ColumnarReader implements PartitionReader<ColumnarBatch> {
  private final Planner.Range range;
  private final BufferAllocator allocator;
  private final EventSource events;
  private final ArrowEvents arrow;
  private boolean inEvent;
  // Timing (only with -Dsegmentstore.jvm.timing=true): nanoseconds per step.
  private final long born = Timing.now();
  private long outside = born; // when next() last returned
  private long tFetch;
  private long tCrc;
  private long tDecode;
  private long tSpark;
  private int batches;

  ColumnarReader(ReadOptions o, StructType schema, Planner.Range range) throws IOException {
    this.range = range;
    long t = Timing.now();
    this.events = new EventSource(
            new WireClient(o), range.segment, range.start, range.end, EventSource.READ_BYTES);
    Timing.log("task-connect", t, range.toString());
    this.allocator = new RootAllocator(Long.MAX_VALUE);
    this.arrow = new ArrowEvents(allocator, schema);
  }

  @Override
  public boolean next() throws IOException {
    if (!Timing.ON) {
      return advance();
    }
    long t0 = System.nanoTime();
    tSpark += t0 - outside;
    boolean more = advance();
    outside = System.nanoTime();
    if (more) {
      batches++;
    }
    return more;
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
    return arrow.batch();
  }

  @Override
  public void close() throws IOException {
    Timing.log(
        "task", born,
        String.format(
            "%s fetch %.1f crc %.1f decode %.1f spark %.1f ms, %d batches", range,
            tFetch / 1e6, tCrc / 1e6, tDecode / 1e6, tSpark / 1e6, batches));
    try {
      arrow.close();
    } finally {
      try {
        events.close();
      } finally {
        allocator.close();
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
