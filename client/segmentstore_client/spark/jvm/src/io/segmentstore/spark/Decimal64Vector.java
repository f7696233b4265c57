// A Spark ColumnVector over an Arrow decimal128 vector of precision <= 18, whose values
// therefore fit the low 8 bytes (little-endian; the high 8 are sign extension). Spark's
// ArrowColumnVector builds a java.math.BigDecimal per decimal value; this hands Spark the
// unscaled long instead, the way Parquet's vectorized reader stores decimal(<=18) columns.
package io.segmentstore.spark;

import org.apache.arrow.vector.DecimalVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

final class Decimal64Vector extends ColumnVector {
  static final int MAX_PRECISION = 18;
  private final DecimalVector values;

  Decimal64Vector(DataType type, DecimalVector values) {
    super(type);
    this.values = values;
  }

  @Override
  public void close() {
    // The vector belongs to its VectorSchemaRoot, which the reader closes.
  }

  @Override
  public boolean hasNull() {
    return values.getNullCount() > 0;
  }

  @Override
  public int numNulls() {
    return values.getNullCount();
  }

  @Override
  public boolean isNullAt(int rowId) {
    return values.isNull(rowId);
  }

  @Override
  public long getLong(int rowId) {
    return values.getDataBuffer().getLong((long) rowId * DecimalVector.TYPE_WIDTH);
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    if (values.isNull(rowId)) {
      return null;
    }
    return Decimal.createUnsafe(getLong(rowId), precision, scale);
  }

  private static UnsupportedOperationException unsupported() {
    return new UnsupportedOperationException("a decimal column has no other accessor");
  }

  @Override
  public boolean getBoolean(int rowId) {
    throw unsupported();
  }

  @Override
  public byte getByte(int rowId) {
    throw unsupported();
  }

  @Override
  public short getShort(int rowId) {
    throw unsupported();
  }

  @Override
  public int getInt(int rowId) {
    throw unsupported();
  }

  @Override
  public float getFloat(int rowId) {
    throw unsupported();
  }

  @Override
  public double getDouble(int rowId) {
    throw unsupported();
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    throw unsupported();
  }

  @Override
  public ColumnarMap getMap(int ordinal) {
    throw unsupported();
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    throw unsupported();
  }

  @Override
  public byte[] getBinary(int rowId) {
    throw unsupported();
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw unsupported();
  }
}
