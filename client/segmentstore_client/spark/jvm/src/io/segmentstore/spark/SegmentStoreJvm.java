// The DataSource V2 entry point, format "segmentstore-jvm" (or this class's name): a batch
// reader of segments written by the Spark sink (encoding=arrow) that runs in the JVM and
// hands Spark ColumnarBatches of Arrow vectors, as Parquet's vectorized reader does, and a
// batch writer of the same events (JvmWrite, EventWriter) that never crosses into a Python
// worker. The Python source "segmentstore" stays the default and keeps everything else
// (atomic, overwrite and writeId writes, streaming, streams, TLS, credentials, raw/records
// output, MessagePack rows); options only it supports are refused here with one line
// saying so. Found by Spark through
// META-INF/services/org.apache.spark.sql.sources.DataSourceRegister once the jar is on
// spark.jars (segmentstore_client.spark.jvm.jar_path() builds it).
package io.segmentstore.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.EnumSet;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

public final class SegmentStoreJvm implements TableProvider, DataSourceRegister {
  public static final String SHORT_NAME = "segmentstore-jvm";

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    ReadOptions o = ReadOptions.parse(options);
    if (o.schemaDdl != null) {
      return StructType.fromDDL(o.schemaDdl);
    }
    long t = Timing.now();
    try {
      return inferFromData(o);
    } catch (IOException e) {
      throw new UncheckedIOException(e.getMessage(), e);
    } finally {
      Timing.log("infer-schema", t, String.join(",", o.segments));
    }
  }

  /** The Spark schema stored with the first event of the first non-empty segment. */
  static StructType inferFromData(ReadOptions o) throws IOException {
    try (WireClient c = new WireClient(o);
        BufferAllocator alloc = Allocators.child("segmentstore-jvm schema")) {
      for (Planner.Range r : Planner.spans(o, c)) {
        // Only the first event is needed: small reads, nothing prefetched past it.
        EventSource events = new EventSource(c, r.segment, r.start, r.start + 1, 64 * 1024);
        if (!events.next()) {
          continue;
        }
        Envelope e = Envelope.open(r.segment, events.offset, events.buf(), events.dataOffset,
            events.length);
        if (!Envelope.ARROW.equals(e.contentType)) {
          throw new IOException(
              "segmentstore-jvm: segment '" + r.segment + "': the event at offset "
                  + events.offset + " is not Arrow rows (content-type '" + e.contentType
                  + "'); the JVM reader reads Arrow rows only: read it with "
                  + "format('segmentstore')");
        }
        try (ArrowEvents arrow = new ArrowEvents(alloc, new StructType())) {
          arrow.open(e, r.segment, events.offset);
          return arrow.storedSchema();
        }
      }
    }
    throw new IOException(
        "segmentstore-jvm: cannot infer a schema: " + String.join(", ", o.segments)
            + " hold no events; give one with spark.read.schema(...)");
  }

  @Override
  public Table getTable(
      StructType schema, Transform[] partitioning, Map<String, String> properties) {
    // One table serves reads and writes (Spark does not say which): options that are not
    // a read's fail a read when it is planned, and a write checks its own (WriteOptions).
    try {
      ReadOptions o = ReadOptions.parse(properties);
      return new SegmentTable(o, null, selected(o, schema));
    } catch (IllegalArgumentException e) {
      return new SegmentTable(null, e, schema);
    }
  }

  static final class SegmentTable implements Table, SupportsRead, SupportsWrite {
    private final ReadOptions options; // null: the options are not a read's (readError)
    private final IllegalArgumentException readError;
    private final StructType schema;

    SegmentTable(ReadOptions options, IllegalArgumentException readError, StructType schema) {
      this.options = options;
      this.readError = readError;
      this.schema = schema;
    }

    @Override
    public String name() {
      return SHORT_NAME + (options == null ? "" : ":" + String.join(",", options.segments));
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      // ACCEPT_ANY_SCHEMA: a write stores its DataFrame's schema as it is (nullability
      // included), as the Python sink does; TRUNCATE only to refuse overwrite in one line.
      return EnumSet.of(TableCapability.BATCH_READ, TableCapability.BATCH_WRITE,
          TableCapability.TRUNCATE, TableCapability.ACCEPT_ANY_SCHEMA);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
      if (options == null) {
        throw readError;
      }
      return new SegmentScan(options, schema);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      return new JvmWrite(info);
    }
  }

  /** {@code schema} narrowed to the 'columns' option's columns, when given. */
  static StructType selected(ReadOptions o, StructType schema) {
    if (o.columns.isEmpty()) {
      return schema;
    }
    StructType out = new StructType();
    for (String name : o.columns) {
      StructField found = null;
      for (StructField f : schema.fields()) {
        if (f.name().toLowerCase(Locale.ROOT).equals(name.toLowerCase(Locale.ROOT))) {
          found = f;
        }
      }
      if (found == null) {
        throw new IllegalArgumentException(
            "segmentstore-jvm: option 'columns' names '" + name + "', which is not a column of "
                + schema.simpleString());
      }
      out = out.add(found);
    }
    return out;
  }

  static final class SegmentScan
      implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
    private final ReadOptions options;
    private StructType schema;
    private volatile InputPartition[] planned; // planInputPartitions' answer, once made

    SegmentScan(ReadOptions options, StructType schema) {
      this.options = options;
      this.schema = schema;
    }

    @Override
    public void pruneColumns(StructType required) {
      schema = required;
    }

    @Override
    public Scan build() {
      return this;
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public String description() {
      return SHORT_NAME + " " + String.join(",", options.segments) + " at "
          + options.endpoint() + ", ReadSchema: " + schema.simpleString();
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      // Spark asks twice per query (two copies of the BatchScanExec of one Scan); the
      // second call gets the first one's ranges instead of another walk over the headers.
      // A Scan is built per query, so a new query (even of the same DataFrame) plans anew.
      InputPartition[] done = planned;
      if (done != null) {
        return done.clone();
      }
      long t = Timing.now();
      try {
        done = Planner.plan(options).toArray(new InputPartition[0]);
      } catch (IOException e) {
        throw new UncheckedIOException(e.getMessage(), e);
      }
      Timing.log("plan", t, java.util.Arrays.toString(done));
      planned = done;
      return done.clone();
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new ColumnarReader.Factory(options, schema);
    }
  }
}
