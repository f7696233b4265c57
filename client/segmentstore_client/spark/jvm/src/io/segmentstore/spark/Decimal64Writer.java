// A top-level DECIMAL(p <= 18) column into an Arrow DecimalVector without a BigDecimal per
// value: Spark's own DecimalWriter goes Decimal -> java.math.BigDecimal -> big-endian bytes
// -> the vector (a fifth of the JVM sink's samples on the benchmark's decimal(18,2) column,
// session 13). A compact Decimal holds its unscaled long, which DecimalVector stores
// sign-extended to 16 bytes: the same values, written directly. Precision and scale are
// enforced as Spark's writer does (a value that does not fit becomes null).
package io.segmentstore.spark;

import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
import org.apache.spark.sql.execution.arrow.ArrowFieldWriter;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.execution.arrow.ArrowWriter$;
import org.apache.spark.sql.types.Decimal;

final class Decimal64Writer extends ArrowFieldWriter {
  private final DecimalVector vector;
  private final int precision;
  private final int scale;

  private Decimal64Writer(DecimalVector vector) {
    this.vector = vector;
    this.precision = vector.getPrecision();
    this.scale = vector.getScale();
  }

  /** Spark's ArrowWriter for {@code root}, with this writer for its DECIMAL(p <= 18) columns. */
  static ArrowWriter create(VectorSchemaRoot root) {
    java.util.List<FieldVector> vectors = root.getFieldVectors();
    ArrowFieldWriter[] writers = new ArrowFieldWriter[vectors.size()];
    for (int i = 0; i < writers.length; i++) {
      FieldVector v = vectors.get(i);
      writers[i] = v instanceof DecimalVector
              && ((DecimalVector) v).getPrecision() <= Decimal.MAX_LONG_DIGITS()
          ? new Decimal64Writer((DecimalVector) v)
          : ArrowWriter$.MODULE$.createFieldWriter(v);
    }
    return new ArrowWriter(root, writers);
  }

  @Override
  public ValueVector valueVector() {
    return vector;
  }

  @Override
  public void setNull() {
    vector.setNull(count());
  }

  @Override
  public void setValue(SpecializedGetters input, int ordinal) {
    Decimal d = input.getDecimal(ordinal, precision, scale);
    if (d.changePrecision(precision, scale)) {
      vector.setSafe(count(), d.toUnscaledLong());
    } else {
      setNull();
    }
  }
}
