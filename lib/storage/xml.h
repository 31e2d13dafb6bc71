/*
 * xml.h - the XML of a store's answers (ListObjectsV2 pages, error
 * bodies), read by a bounded scanner, not a general XML parser (private to
 * lib/storage; s3_xml.c is its user).
 *
 * us_xml_root first checks that the whole document is one well-formed
 * element: comments and processing instructions skipped whole, CDATA and
 * DOCTYPE refused, attribute values read as values (a tag name or '>' in
 * one is text), tags balanced and nested at most 16 deep.  A malformed
 * document is refused, never read up to where it breaks.  Then
 * us_xml_next_child walks an element's direct children only.  Every access
 * stays inside the span: nothing is trusted to be NUL-terminated, no
 * length is trusted at all.
 */
#ifndef US_XML_H
#define US_XML_H

#include <stdbool.h>

/* A span of the document: [p, end). */
struct us_xml_span {
	const char *p, *end;
};

/* us_xml_root - is @doc one well-formed element?  Its name and content
 * into *@name and *@body; else false with the reason in *@why. */
bool us_xml_root(struct us_xml_span doc, struct us_xml_span *name,
		 struct us_xml_span *body, const char **why);

/* us_xml_next_child - the next child element of @in (content us_xml_root
 * checked): its name and content, in->p moved past it; false at the end. */
bool us_xml_next_child(struct us_xml_span *in, struct us_xml_span *name,
		       struct us_xml_span *out);

/* us_xml_name_is - is the element name @n exactly @s? */
bool us_xml_name_is(struct us_xml_span n, const char *s);

#endif /* US_XML_H */
