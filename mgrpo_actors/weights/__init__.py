"""Weight sync, the end of step 6: a learner's new policy version as a file (a full snapshot, or a delta against
the version before), published through the object store or a shared directory, fetched and loaded by its side's
rollout engines."""
