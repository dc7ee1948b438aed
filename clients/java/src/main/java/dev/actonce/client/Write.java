package dev.actonce.client;

/**
 * What a successful write made.
 *
 * @param id the derived id of the artifact, proposal, thread or message; for a direct edit, the
 *     edited artifact's id
 * @param outcome what the write did
 * @param version the artifact's version after a create or an edit; 0 otherwise
 */
public record Write(String id, Outcome outcome, long version) {}
