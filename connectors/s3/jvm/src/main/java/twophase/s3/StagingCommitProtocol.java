package twophase.s3;

import org.apache.hadoop.mapreduce.JobContext;
import org.apache.spark.internal.io.cloud.PathOutputCommitProtocol;

/**
 * Spark's cloud commit protocol (spark-hadoop-cloud's PathOutputCommitProtocol), which also hands
 * the write's committer the id Spark names the write's files after. Spark names every file
 * part-NNNNN-JOBID..., JOBID being the id this protocol is built with and never put in the job's
 * Hadoop configuration; an attempt killed while a file was open leaves a multipart upload at that
 * name and no other record of it, so twophase's committer writes the id into its marker and the
 * S3 sink's lingering cleanup can abort exactly that write's uploads. Any other write behaves as
 * under PathOutputCommitProtocol: the key is only read by twophase's committer.
 */
public class StagingCommitProtocol extends PathOutputCommitProtocol {
  /** The job configuration key this protocol sets: the id in the names of the write's files. */
  public static final String FILE_JOB_ID = "twophase.staged.file.job.id";

  private final String fileJobId;

  public StagingCommitProtocol(String jobId, String dest, boolean dynamicPartitionOverwrite) {
    super(jobId, dest, dynamicPartitionOverwrite);
    this.fileJobId = jobId;
  }

  @Override
  public void setupJob(JobContext jobContext) {
    // before the committer's own setupJob, which records the write (StagingCommitter.setupJob)
    jobContext.getConfiguration().set(FILE_JOB_ID, fileJobId);
    super.setupJob(jobContext);
  }
}
