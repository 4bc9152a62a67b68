// @workbench/web: a client of the Workbench end-user API, and the <workbench-feed> element.

export {
  WorkbenchClient,
  WorkbenchError,
  FEED_EVENTS,
  cardView,
  isTokenRefusal,
  type Card,
  type CardElement,
  type CardStatus,
  type CardView,
  type FeedEvent,
  type FeedEventType,
  type ListOptions,
  type PlatformContent,
  type ProblemInit,
  type StreamOptions,
  type StreamSubscription,
  type StreamTicket,
  type WorkbenchClientOptions,
} from "./client";
export { WorkbenchFeedElement, FEED_ELEMENT_NAME, defineWorkbenchFeed } from "./element";
