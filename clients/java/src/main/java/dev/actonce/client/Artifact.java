package dev.actonce.client;

/** A versioned JSON document in the store; its data as UTF-8 JSON text. */
public record Artifact(String id, String kind, long version, String dataJson, boolean archived) {}
