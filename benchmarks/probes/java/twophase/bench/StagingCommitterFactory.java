package twophase.bench;

import java.io.IOException;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.lib.output.PathOutputCommitter;
import org.apache.hadoop.mapreduce.lib.output.PathOutputCommitterFactory;

/** Makes a {@link StagingCommitter}; named per write by mapreduce.outputcommitter.factory.scheme.s3a. */
public class StagingCommitterFactory extends PathOutputCommitterFactory {
  @Override
  public PathOutputCommitter createOutputCommitter(Path outputPath, TaskAttemptContext context) throws IOException {
    return new StagingCommitter(outputPath, context);
  }
}
