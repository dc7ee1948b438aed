package dev.actonce.client;

/** One entry of a thread: kind "notice" (starts no turn) or "message" (asked for the turn). */
public record Message(String id, String kind, String text) {}
