// The task side of a segmentstore-jvm write (writer.py's write_partition, in the JVM): a
// partition's rows are cut into groups of exactly rowsPerEvent rows (group k = rows
// k*R .. (k+1)*R - 1), each group encoded as one event or split into pieces
// (EventEncoder), and every event written with event number (k << 21) + 2 * piece + 1 by
// a writer whose id is uuid5("writer|identity|target|partition") in options.py's
// namespace: never the attempt. A retried or speculative attempt writes as the same
// writer with the same numbers; the server reports at SetupAppend the last number it
// holds, groups it holds whole are not even encoded, and anything racing in from another
// attempt is dropped by the server's per-append check. As with the Python sink, each
// partition must see the same rows in the same order on every attempt.
package io.segmentstore.spark;

import java.io.IOException;
import java.util.UUID;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;

final class EventWriter implements DataWriter<InternalRow> {
  static final int PIECE_BITS = 21;
  /** writer.py FENCE_CHECK_INTERVAL: how often a writing attempt looks for the fence. */
  static final long FENCE_CHECK_NANOS = 200_000_000L;

  /** options.py event_number: the number of piece {@code piece} of group {@code group}. */
  static long eventNumber(long group, int piece) {
    return (group << PIECE_BITS) + 2L * piece + 1;
  }

  /** options.py writer_id: the same for every attempt of a partition of one write. */
  static UUID writerId(UUID identity, String target, int partition) {
    return Planner.uuid5(Planner.NAMESPACE, "writer|" + identity + "|" + target + "|" + partition);
  }

  /** What a partition's successful attempt tells the driver (writer.py PartitionCommit). */
  static final class Commit implements WriterCommitMessage {
    private static final long serialVersionUID = 1L;
    final int partition;
    final int attempt;
    final String target;
    final String writerId;
    String identity = "";
    long rows;
    long events;
    long bytes;
    long lastEventNumber;
    long resumedFrom;
    long groupsSkipped; // groups the server held whole: counted, not encoded
    boolean skipped; // the writeId was committed already: nothing written

    Commit(int partition, int attempt, String target, UUID writerId) {
      this.partition = partition;
      this.attempt = attempt;
      this.target = target;
      this.writerId = writerId.toString();
    }

    @Override
    public String toString() {
      return "{\"partition\": " + partition + ", \"attempt\": " + attempt + ", \"target\": \""
          + target.replace("\\", "\\\\").replace("\"", "\\\"") + "\", \"writer_id\": \""
          + writerId + "\", \"identity\": \"" + identity + "\", \"rows\": " + rows
          + ", \"events\": " + events + ", \"bytes\": " + bytes + ", \"last_event_number\": "
          + lastEventNumber + ", \"resumed_from\": " + resumedFrom + ", \"groups_skipped\": "
          + groupsSkipped + ", \"skipped\": " + skipped + "}";
    }
  }

  private final WriteOptions options;
  private final StructType schema;
  private final UUID writer;
  private final Commit msg;
  private final String markerScope; // null: no writeId, no commit marker
  private final long markerSeq;
  private final UUID identity;
  private final UUID run;
  private long fenceChecked; // System.nanoTime() of the last fence check
  private BufferAllocator allocator;
  private EventEncoder encoder;
  private WireClient client;
  private AppendPipe pipe;
  private long held; // the last event number the server held at setup
  private long group; // the group being filled
  private int inGroup; // rows of it seen so far
  private boolean skipping; // the server holds the whole group: rows are only counted

  EventWriter(WriteOptions options, StructType schema, UUID identity, UUID run,
      String markerScope, long markerSeq, int partition, int attempt) {
    this.identity = identity;
    this.run = run;
    this.options = options;
    this.schema = schema;
    this.markerScope = markerScope;
    this.markerSeq = markerSeq;
    String target = options.targetOf(partition);
    this.writer = writerId(identity, target, partition);
    this.msg = new Commit(partition, attempt, target, writer);
    this.msg.identity = identity.toString();
  }

  @Override
  public void write(InternalRow row) throws IOException {
    if (msg.skipped) {
      msg.rows++; // the write was committed: rows only counted (the driver compares them)
      return;
    }
    if (inGroup == 0) {
      if (pipe == null) {
        open();
        if (msg.skipped) {
          msg.rows++;
          return;
        }
      }
      skipping = held >= eventNumber(group + 1, 0);
      msg.groupsSkipped += skipping ? 1 : 0;
    }
    if (!skipping) {
      encoder.add(row);
    }
    msg.rows++;
    if (++inGroup == options.rowsPerEvent) {
      endGroup();
    }
  }

  private void open() throws IOException {
    client = new WireClient(
        options.host, options.port, options.timeoutMillis, options.connectTimeoutMillis);
    if (markerReached()) {
      msg.skipped = true; // as writer.py: a committed writeId is not written again
      return;
    }
    stopIfFenced();
    pipe = new AppendPipe(client, writer, msg.target);
    held = pipe.held();
    msg.resumedFrom = held;
    allocator = Allocators.child("segmentstore-jvm write partition " + msg.partition);
    encoder = new EventEncoder(allocator, schema, options.compression, options.maxEventBytes);
  }

  /**
   * The driver's abort sets the run's fence attribute on the targets (writer.py
   * _stop_if_fenced): an attempt still writing then stops. Asked on the append connection
   * once the appends in flight are acknowledged (replies come in order).
   */
  private void stopIfFenced() throws IOException {
    if (pipe != null) {
      pipe.drain();
    }
    long value = client.attribute(msg.target, WriteIds.fence(run));
    fenceChecked = System.nanoTime();
    if (value != WireClient.NULL_ATTRIBUTE) {
      throw new IOException(
          "segmentstore-jvm: partition " + msg.partition + ": the driver aborted write "
              + identity + " (run " + run + "); this attempt stops");
    }
  }

  private void endGroup() throws IOException {
    if (!skipping && System.nanoTime() - fenceChecked >= FENCE_CHECK_NANOS) {
      stopIfFenced();
    }
    if (!skipping) {
      int piece = 0;
      for (EventEncoder.Piece p : encoder.pieces()) {
        long n = eventNumber(group, piece++);
        if (n <= held) {
          continue; // a piece of a group the server holds part of
        }
        pipe.append(p.record, n);
        msg.events++;
        msg.bytes += p.record.length;
        msg.lastEventNumber = n;
      }
    }
    group++;
    inGroup = 0;
  }

  private boolean markerReached() throws IOException {
    if (markerScope == null) {
      return false;
    }
    long value = client.attribute(msg.target, WriteIds.commitMarker(markerScope));
    return value != WireClient.NULL_ATTRIBUTE && value >= markerSeq;
  }

  @Override
  public WriterCommitMessage commit() throws IOException {
    if (client == null && markerScope != null) { // an empty partition: skipped too if committed
      client = new WireClient(
          options.host, options.port, options.timeoutMillis, options.connectTimeoutMillis);
      msg.skipped = markerReached();
    }
    if (msg.skipped) {
      return msg;
    }
    if (inGroup > 0) {
      endGroup();
    }
    if (pipe != null) {
      pipe.drain();
    }
    if (held >= eventNumber(group, 0)) {
      // The server holds events of groups this attempt does not have: committing would
      // report these rows while the target keeps more (writer.py has the same check).
      throw new IOException("segmentstore-jvm: partition " + msg.partition + " -> "
          + msg.target + " (writer " + writer + "): the server holds this writer's events up "
          + "to number " + held + ", beyond this attempt's " + group + " row group(s) ("
          + msg.rows + " rows): an earlier attempt or run of this write had more rows (a "
          + "non-deterministic input, or a writeId reused with other data); the target "
          + "keeps those events, so this write is not committed");
    }
    if (msg.lastEventNumber == 0 && held > 0) {
      msg.lastEventNumber = held;
    }
    return msg;
  }

  @Override
  public void abort() {
    // Non-atomic: what was acknowledged stays; a retry of this partition resumes after it.
    closeClient();
  }

  @Override
  public void close() {
    closeClient();
    try {
      if (encoder != null) {
        encoder.close();
      }
      if (allocator != null) {
        allocator.close(); // throws on leaked Arrow memory: a bug, but not the task's error
      }
    } catch (RuntimeException e) {
      org.slf4j.LoggerFactory.getLogger("io.segmentstore.spark")
          .warn("segmentstore-jvm: releasing a task's Arrow memory failed: {}", e.toString());
    } finally {
      encoder = null;
      allocator = null;
    }
  }

  private void closeClient() {
    if (client != null) {
      try {
        client.close();
      } catch (IOException e) {
        // the socket is gone either way
      }
      client.recycle();
      client = null;
    }
  }
}
