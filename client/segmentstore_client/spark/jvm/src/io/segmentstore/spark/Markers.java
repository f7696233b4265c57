// The driver's commit of a write with a writeId (commit.py, direct writes): raise the
// commit marker of the write's scope to its sequence number on every target a partition
// wrote to, and store the write's fingerprint (rows, schema hash) beside it; when every
// partition found the marker already raised (a repeated writeId), compare with the stored
// fingerprint instead, and refuse a repeat with other rows or another schema, as the
// Python sink's WriteIdReused does. Attribute writes are compare-and-set loops (bounded).
package io.segmentstore.spark;

import java.io.IOException;
import java.util.TreeSet;
import java.util.UUID;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;

final class Markers {
  static final int CAS_TRIES = 20;

  private Markers() {}

  static void commit(WriteOptions o, String scope, long seq, StructType schema,
      WriterCommitMessage[] messages, long rows, boolean skipped) throws IOException {
    try (WireClient c =
        new WireClient(o.host, o.port, o.timeoutMillis, o.connectTimeoutMillis)) {
      long schemaHash = WriteIds.schemaHash(schema.json());
      if (skipped) {
        checkRepeat(c, o, scope, seq, rows, schemaHash);
      }
      TreeSet<String> targets = new TreeSet<>();
      for (int p = 0; p < messages.length; p++) {
        targets.add(o.targetOf(p));
      }
      for (String t : targets) {
        raiseTo(c, t, WriteIds.commitMarker(scope), seq);
      }
      if (!skipped) {
        for (String t : targets) {
          set(c, t, WriteIds.fingerprint("rows", scope, seq), rows);
          set(c, t, WriteIds.fingerprint("schema", scope, seq), schemaHash);
        }
      }
    }
  }

  private static void checkRepeat(WireClient c, WriteOptions o, String scope, long seq,
      long rows, long schemaHash) throws IOException {
    String target = o.segments.get(0);
    long hadRows = c.attribute(target, WriteIds.fingerprint("rows", scope, seq));
    long hadSchema = c.attribute(target, WriteIds.fingerprint("schema", scope, seq));
    String what = "writeId '" + o.writeId + "'"
        + (o.writeVersion == null ? "" : " version " + o.writeVersion);
    if (hadRows != WireClient.NULL_ATTRIBUTE && hadRows != rows) {
      throw new IllegalStateException("segmentstore-jvm: " + what + " was already committed "
          + "with " + hadRows + " row(s); this write has " + rows + ": nothing written (give a "
          + "new writeVersion, or a new writeId, to write new data)");
    }
    if (hadSchema != WireClient.NULL_ATTRIBUTE && hadSchema != schemaHash) {
      throw new IllegalStateException("segmentstore-jvm: " + what + " was already committed "
          + "with another schema: nothing written (give a new writeVersion, or a new writeId, "
          + "to write new data)");
    }
  }

  /** Raises {@code attribute} of {@code target} to at least {@code value}. */
  static void raiseTo(WireClient c, String target, UUID attribute, long value)
      throws IOException {
    for (int i = 0; i < CAS_TRIES; i++) {
      long current = c.attribute(target, attribute);
      if (current != WireClient.NULL_ATTRIBUTE && current >= value) {
        return;
      }
      if (c.compareAndSetAttribute(target, attribute, value, current)) {
        return;
      }
    }
    throw contention(target);
  }

  private static void set(WireClient c, String target, UUID attribute, long value)
      throws IOException {
    for (int i = 0; i < CAS_TRIES; i++) {
      long current = c.attribute(target, attribute);
      if (current == value || c.compareAndSetAttribute(target, attribute, value, current)) {
        return;
      }
    }
    throw contention(target);
  }

  private static IOException contention(String target) {
    return new IOException(
        "segmentstore-jvm: could not set an attribute of '" + target + "' (contention)");
  }
}
