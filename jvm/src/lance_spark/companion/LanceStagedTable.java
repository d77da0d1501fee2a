package lance_spark.companion;

import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.StagedTable;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;

/**
 * A table {@link LanceSessionCatalog} creates or replaces with a query ({@code CREATE TABLE
 * ... AS SELECT}, {@code CREATE OR REPLACE TABLE}, {@code REPLACE TABLE}, {@code
 * DataFrameWriterV2.create / replace / createOrReplace}, {@code saveAsTable}): Spark writes the
 * query into it, then commits or aborts it.
 *
 * <p>Spark interfaces: {@code StagedTable}, {@code SupportsWrite} (public DSv2), returned by
 * the catalog's {@code StagingTableCatalog} methods.
 *
 * <p>A Lance table's stage is the catalog entry (made by {@code stageCreate}, so that a managed
 * table has its location) and the Lance write itself, which is one Lance version: a create
 * writes the table's first version; a replace writes a new version of the table with the
 * query's rows and columns (its history stays, as Delta's {@code REPLACE} keeps it). The commit
 * sets the table properties in Lance's config (Python); a {@code REPLACE TABLE} without a query
 * makes the table empty with its new columns. An aborted create drops the entry (a managed
 * table's folder goes with it); an aborted replace has committed nothing.
 */
final class LanceStagedTable implements StagedTable, SupportsWrite {
  /** What the commit and the abort do besides the write; the catalog supplies them. */
  interface Stage {
    void commit(boolean written);

    void abort();
  }

  private final Table table;
  private final org.apache.spark.sql.connector.catalog.Column[] columns;
  private final Map<String, String> writeOptions;
  private final boolean replace;
  private final Stage stage;
  private boolean written;

  /**
   * {@code table}: where the rows go (a {@link LanceCatalogTable}, or any writable table of
   * another provider); {@code writeOptions}: added to the write's (the statement's OPTIONS);
   * {@code replace}: the write replaces every row and the columns; {@code columns}: the new
   * table's (what Spark checks the query's columns against).
   */
  LanceStagedTable(
      Table table,
      org.apache.spark.sql.connector.catalog.Column[] columns,
      Map<String, String> writeOptions,
      boolean replace,
      Stage stage) {
    this.table = table;
    this.columns = columns;
    this.writeOptions = writeOptions;
    this.replace = replace;
    this.stage = stage;
  }

  @Override
  public String name() {
    return table.name();
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    StructType schema = new StructType();
    for (org.apache.spark.sql.connector.catalog.Column column : columns) {
      schema = schema.add(column.name(), column.dataType(), column.nullable());
    }
    return schema;
  }

  @Override
  public org.apache.spark.sql.connector.catalog.Column[] columns() {
    return columns;
  }

  @Override
  public Map<String, String> properties() {
    return table.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    return table.capabilities();
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    written = true;
    WriteBuilder builder = table instanceof LanceCatalogTable lance
        ? lance.newWriteBuilder(info, writeOptions)
        : ((SupportsWrite) table).newWriteBuilder(info);
    // Spark writes a staged table as an append (it is new); a replace is Lance's overwrite.
    return replace ? ((SupportsTruncate) builder).truncate() : builder;
  }

  @Override
  public void commitStagedChanges() {
    stage.commit(written);
  }

  @Override
  public void abortStagedChanges() {
    stage.abort();
  }
}
