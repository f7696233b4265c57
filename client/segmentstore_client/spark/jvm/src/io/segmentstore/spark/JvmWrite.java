// The driver side of a segmentstore-jvm write: WriteBuilder -> Write -> BatchWrite ->
// a serializable DataWriterFactory (one EventWriter per task). Before any task starts,
// the driver creates the targets (option create, the default) or checks that they exist,
// and applies saveMode as the Python sink does (datasource.py prepare_targets): errorifexists
// fails on a target that holds data, ignore then writes nothing. The write identity is
// random per write (the Python sink without writeId), drawn here once, so every attempt
// of a task derives the same writer id. Writes are not atomic: commit reports what each
// partition wrote; abort logs one line saying the targets keep what was written. The
// last commit's messages stay readable on the driver (lastReport) for tests and tools.
package io.segmentstore.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

public final class JvmWrite implements WriteBuilder, SupportsTruncate, Write, BatchWrite {
  private static final Logger LOG = LoggerFactory.getLogger("io.segmentstore.spark");
  private static volatile String lastReport = "";
  private static volatile String lastAbort = "";

  private final WriteOptions options;
  private final StructType schema;
  private final UUID identity;
  private final UUID run = UUID.randomUUID(); // names this run's fence
  private final String markerScope; // null: no writeId
  private final long markerSeq;
  private boolean ignore;

  JvmWrite(LogicalWriteInfo info) {
    this.options = WriteOptions.parse(info.options().asCaseSensitiveMap());
    this.schema = info.schema();
    for (org.apache.spark.sql.types.StructField f : schema.fields()) {
      if (holdsYearMonth(f.dataType())) {
        throw new IllegalArgumentException("segmentstore-jvm: column '" + f.name() + "' holds "
            + "INTERVAL YEAR TO MONTH, which the Python reader and sink cannot convert to "
            + "Arrow; cast it (to string or int) before writing");
      }
    }
    if (options.writeId == null) {
      identity = UUID.randomUUID();
      markerScope = null;
      markerSeq = 0;
    } else {
      identity = WriteIds.identity(options.writeId, options.writeVersion);
      markerScope = WriteIds.markerScope(options.writeId, options.writeVersion, identity);
      markerSeq = options.writeVersion == null ? 0 : options.writeVersion;
    }
  }

  /** Whether {@code t} is or nests a year-month interval (pyspark has no Arrow type for it). */
  private static boolean holdsYearMonth(org.apache.spark.sql.types.DataType t) {
    if (t instanceof org.apache.spark.sql.types.YearMonthIntervalType) {
      return true;
    }
    if (t instanceof StructType s) {
      for (org.apache.spark.sql.types.StructField f : s.fields()) {
        if (holdsYearMonth(f.dataType())) {
          return true;
        }
      }
      return false;
    }
    if (t instanceof org.apache.spark.sql.types.ArrayType a) {
      return holdsYearMonth(a.elementType());
    }
    if (t instanceof org.apache.spark.sql.types.MapType m) {
      return holdsYearMonth(m.keyType()) || holdsYearMonth(m.valueType());
    }
    return false;
  }

  /** The last committed write's partitions (JSON), on this driver: for tests and tools. */
  public static String lastReport() {
    return lastReport;
  }

  /** The last aborted write's WARN line, on this driver (it names the run). */
  public static String lastAbort() {
    return lastAbort;
  }

  /** The writer id of a partition (options.py writer_id), for checks against the Python sink. */
  public static String writerIdOf(String identity, String target, int partition) {
    return EventWriter.writerId(UUID.fromString(identity), target, partition).toString();
  }

  /** options.py event_number(group, piece). */
  public static long eventNumberOf(long group, int piece) {
    return EventWriter.eventNumber(group, piece);
  }

  @Override
  public WriteBuilder truncate() {
    throw WriteOptions.refuse(".mode('overwrite')");
  }

  @Override
  public Write build() {
    return this;
  }

  @Override
  public String description() {
    return SegmentStoreJvm.SHORT_NAME + " write to " + String.join(",", options.segments)
        + " at " + options.endpoint();
  }

  @Override
  public BatchWrite toBatch() {
    List<String> busy;
    try {
      busy = prepareTargets();
    } catch (IOException e) {
      throw new UncheckedIOException(e.getMessage(), e);
    }
    if (!busy.isEmpty() && options.saveMode.equals("error")) {
      throw new IllegalStateException(
          "segmentstore-jvm: target '" + busy.get(0) + "' already holds data (saveMode "
              + "errorifexists); use saveMode ignore or .mode('append')");
    }
    ignore = !busy.isEmpty() && options.saveMode.equals("ignore");
    return this;
  }

  /** Creates or checks every target; returns those that already hold data. */
  private List<String> prepareTargets() throws IOException {
    List<String> busy = new ArrayList<>();
    try (WireClient c = new WireClient(
        options.host, options.port, options.timeoutMillis, options.connectTimeoutMillis)) {
      for (String seg : options.segments) {
        if (options.create) {
          c.createSegment(seg);
        }
        WireClient.Info info = c.info(seg);
        long base = c.attribute(seg, Planner.BASE_ATTRIBUTE);
        long start = Math.max(info.startOffset, base == WireClient.NULL_ATTRIBUTE ? 0 : base);
        if (info.length > start) {
          busy.add(seg);
        }
      }
    }
    return busy;
  }

  @Override
  public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
    return new Factory(options, schema, identity, run, markerScope, markerSeq, ignore);
  }

  @Override
  public boolean useCommitCoordinator() {
    return false; // every attempt writes as the same writer: the server de-duplicates
  }

  @Override
  public void commit(WriterCommitMessage[] messages) {
    StringBuilder b = new StringBuilder("[");
    long rows = 0;
    boolean skipped = messages.length > 0;
    for (WriterCommitMessage m : messages) {
      if (m != null) {
        b.append(b.length() > 1 ? ", " : "").append(m);
        rows += ((EventWriter.Commit) m).rows;
      }
      skipped &= m != null && ((EventWriter.Commit) m).skipped;
    }
    lastReport = b.append("]").toString();
    if (markerScope != null && !ignore) {
      try {
        Markers.commit(options, markerScope, markerSeq, schema, messages, rows, skipped);
      } catch (IOException e) {
        throw new UncheckedIOException(e.getMessage(), e);
      }
    }
    LOG.info("segmentstore-jvm write {}: {} row(s) in {} partition(s)", identity, rows,
        messages.length);
  }

  @Override
  public void abort(WriterCommitMessage[] messages) {
    List<String> lines = new ArrayList<>();
    String fenced = fenceAndReport(messages, lines);
    int done = 0;
    for (WriterCommitMessage m : messages) {
      done += m == null ? 0 : 1;
    }
    String hint = options.writeId == null
        ? "the write had no writeId, so a new run writes everything again; give "
            + ".option('writeId', ...) to make retries resume"
        : "run the write again with .option('writeId', '" + options.writeId + "') "
            + (options.writeVersion == null ? ""
                : ".option('writeVersion', " + options.writeVersion + ") ")
            + "to finish it without duplicates";
    String line = "segmentstore-jvm write " + identity + " (run " + run + ") to "
        + String.join(",", options.segments) + " aborted" + fenced + ": non-atomic write, the "
        + "targets keep what was written (" + done + " of " + messages.length + " partition(s) "
        + "complete; incomplete ones keep their durable events); " + hint;
    lines.add(0, line);
    lastAbort = String.join("\n", lines);
    LOG.warn(lastAbort);
  }

  /**
   * Sets the run's fence on every target (attempts still writing stop), then adds one line
   * per partition saying what it left (commit.py _left_behind), from its writer's last
   * durable event number once two reads in a row agree; "" if done, else why not.
   */
  private String fenceAndReport(WriterCommitMessage[] messages, List<String> lines) {
    try (WireClient c = new WireClient(
        options.host, options.port, options.timeoutMillis, options.connectTimeoutMillis)) {
      for (String seg : options.segments) {
        Markers.raiseTo(c, seg, WriteIds.fence(run), 1);
      }
      long[] last = lastNumbers(c, messages.length);
      long until = System.nanoTime() + Math.min(5_000L, options.timeoutMillis) * 1_000_000L;
      while (System.nanoTime() < until) {
        Thread.sleep(250);
        long[] now = lastNumbers(c, messages.length);
        if (java.util.Arrays.equals(now, last)) {
          break;
        }
        last = now;
      }
      for (int p = 0; p < messages.length; p++) {
        lines.add(leftBehind(p, (EventWriter.Commit) messages[p], last[p]));
      }
      return "";
    } catch (IOException e) {
      return " (the run's fence could not be set: " + e.getMessage() + ")";
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return " (interrupted while reporting)";
    }
  }

  private long[] lastNumbers(WireClient c, int partitions) throws IOException {
    long[] out = new long[partitions];
    for (int p = 0; p < partitions; p++) {
      String target = options.targetOf(p);
      out[p] = c.attribute(target, EventWriter.writerId(identity, target, p));
    }
    return out;
  }

  private String leftBehind(int p, EventWriter.Commit msg, long last) {
    String target = options.targetOf(p);
    String where = "partition " + p + " -> " + target + " (writer "
        + EventWriter.writerId(identity, target, p) + ")";
    if (msg != null) {
      return msg.skipped ? where + ": already committed earlier; nothing written"
          : where + ": complete, " + msg.rows + " row(s) in events up to number "
              + msg.lastEventNumber;
    }
    if (last == WireClient.NULL_ATTRIBUTE || last < 1) {
      return where + ": nothing written";
    }
    long group = (last - 1) >> EventWriter.PIECE_BITS;
    long piece = ((last - 1) & ((1L << EventWriter.PIECE_BITS) - 1)) / 2;
    long rows = (group + 1) * options.rowsPerEvent;
    return where + ": incomplete; events up to number " + last + " (row group " + group
        + ", piece " + piece + ") are durable: rows 0.." + (rows - 1)
        + ", fewer if that group was split into pieces";
  }

  static final class Factory implements DataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final WriteOptions options;
    private final StructType schema;
    private final UUID identity;
    private final UUID run;
    private final String markerScope;
    private final long markerSeq;
    private final boolean ignore;

    Factory(WriteOptions options, StructType schema, UUID identity, UUID run,
        String markerScope, long markerSeq, boolean ignore) {
      this.options = options;
      this.schema = schema;
      this.identity = identity;
      this.run = run;
      this.markerScope = markerScope;
      this.markerSeq = markerSeq;
      this.ignore = ignore;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      org.apache.spark.TaskContext ctx = org.apache.spark.TaskContext.get();
      int attempt = ctx == null ? 0 : ctx.attemptNumber();
      if (ignore) {
        return new Discard(partitionId, attempt, options.targetOf(partitionId));
      }
      return new EventWriter(
          options, schema, identity, run, markerScope, markerSeq, partitionId, attempt);
    }
  }

  /** saveMode=ignore found data: the task consumes its rows and writes nothing. */
  static final class Discard implements DataWriter<InternalRow> {
    private final EventWriter.Commit msg;

    Discard(int partition, int attempt, String target) {
      msg = new EventWriter.Commit(partition, attempt, target, new UUID(0, 0));
    }

    @Override
    public void write(InternalRow row) {}

    @Override
    public WriterCommitMessage commit() {
      return msg;
    }

    @Override
    public void abort() {}

    @Override
    public void close() {}
  }
}
