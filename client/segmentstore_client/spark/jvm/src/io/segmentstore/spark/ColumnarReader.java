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

  ColumnarReader(ReadOptions o, StructType schema, Planner.Range range) throws IOException {
    this.range = range;
    this.events = new EventSource(
            new WireClient(o), range.segment, range.start, range.end, EventSource.READ_BYTES);
    this.allocator = new RootAllocator(Long.MAX_VALUE);
    this.arrow = new ArrowEvents(allocator, schema);
  }

  @Override
  public boolean next() throws IOException {
    // Bounded: every pass either yields a batch or consumes one event of the range.
    while (true) {
      if (inEvent && arrow.next()) {
        return true;
      }
      inEvent = false;
      if (!events.next()) {
        return false;
      }
      Envelope e =
          Envelope.open(range.segment, events.offset, events.buf(), events.dataOffset,
              events.length);
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
      arrow.open(e, range.segment, events.offset);
      inEvent = true;
    }
  }

  @Override
  public ColumnarBatch get() {
    return arrow.batch();
  }

  @Override
  public void close() throws IOException {
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
