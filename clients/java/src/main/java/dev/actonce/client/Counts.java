package dev.actonce.client;

/** An attempt's writes by outcome. */
public record Counts(long applied, long alreadyApplied, long skipped, long failed) {}
